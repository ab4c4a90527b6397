"""A FUSE file system that passes every call through to a folder and writes one line per file created, removed or
renamed to a log: a stand-in for Colab's Google Drive mount (also FUSE) in tests/test_store_on_fuse.py.

It implements no `lock`: the kernel then keeps POSIX locks itself, for the processes of this machine, which is
what a FUSE mount whose daemon ignores locks gives. Run as `python tests/fuse_passthrough.py FOLDER MOUNT LOG`;
it stays in the foreground until the mount is unmounted (fusermount -u MOUNT)."""
from __future__ import annotations

import errno
import os
import sys

from fuse import FUSE, FuseOSError, Operations


class Passthrough(Operations):
    def __init__(self, root: str, log: str):
        self.root, self.log = root, open(log, "a", buffering=1)

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _say(self, what: str, path: str) -> None:
        self.log.write(f"{what} {path}\n")

    def __call__(self, op, *args):
        try:
            return super().__call__(op, *args)
        except OSError as exc:
            raise FuseOSError(exc.errno or errno.EIO) from exc

    def getattr(self, path, fh=None):
        st = os.lstat(self._real(path))
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                            "st_size", "st_uid")}

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._real(path))]

    def access(self, path, mode):
        if not os.access(self._real(path), mode):
            raise FuseOSError(errno.EACCES)

    def open(self, path, flags):
        return os.open(self._real(path), flags)

    def create(self, path, mode, fi=None):
        self._say("create", path)
        return os.open(self._real(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._real(path), length)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        os.fsync(fh)

    def release(self, path, fh):
        os.close(fh)

    def unlink(self, path):
        self._say("unlink", path)
        os.unlink(self._real(path))

    def rename(self, old, new):
        self._say("rename", f"{old} -> {new}")
        os.rename(self._real(old), self._real(new))

    def mkdir(self, path, mode):
        os.mkdir(self._real(path), mode)

    def rmdir(self, path):
        os.rmdir(self._real(path))

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._real(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._real(path), times)

    def statfs(self, path):
        st = os.statvfs(self._real(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}


if __name__ == "__main__":
    root, mount, log = sys.argv[1:4]
    FUSE(Passthrough(root, log), mount, foreground=True, nothreads=False)
