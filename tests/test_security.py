"""--share/--auth and the upload limit, checked through the running server."""
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

import pytest

from app import reachable_from_elsewhere, resolve_auth
from tests.conftest import ROOT
from utils.events import StudioError


def status(url: str, opener=None) -> int:
    try:
        return (opener or urllib.request.build_opener()).open(url, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def login(base: str, user: str, password: str):
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    data = urllib.parse.urlencode({"username": user, "password": password}).encode()
    try:
        opener.open(base + "/login", data=data, timeout=10)
    except urllib.error.HTTPError as exc:
        return None if exc.code in (400, 401) else opener
    return opener


def upload(base: str, opener, payload: bytes) -> tuple[int, str]:
    boundary = "studio-test-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"clip.bin\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + payload + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(base + "/gradio_api/upload", data=body,
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    try:
        with (opener or urllib.request.build_opener()).open(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_share_without_credentials_prints_a_password_that_guards_the_app(start_app):
    server = start_app("--share")  # the tunnel request fails on conftest's dead proxy: the app stays local
    match = re.search(r"password: (\S+)", server.output())
    assert match, server.output()
    assert status(server.url + "/config") == 401
    assert login(server.url, "studio", "wrong-password") is None
    opener = login(server.url, "studio", match.group(1))
    assert opener is not None and status(server.url + "/config", opener) == 200


def test_auth_from_flag_and_from_environment(start_app):
    by_flag = start_app("--auth", "curator:s3cret")
    assert status(by_flag.url + "/config") == 401
    assert status(by_flag.url + "/config", login(by_flag.url, "curator", "s3cret")) == 200
    by_env = start_app(env={"AMHARIC_TTS_AUTH": "envuser:envpass"})
    assert status(by_env.url + "/config") == 401
    assert status(by_env.url + "/config", login(by_env.url, "envuser", "envpass")) == 200


def test_malformed_auth_is_refused_with_a_message():
    with pytest.raises(StudioError, match="USER:PASS"):
        resolve_auth("no-colon", share=False)
    out = subprocess.run([sys.executable, str(ROOT / "app.py"), "--auth", "user:"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 2 and "USER:PASS" in out.stderr


def test_local_app_without_share_needs_no_login():
    assert resolve_auth(None, share=False) == (None, None)
    assert not any(reachable_from_elsewhere(False, host) for host in ("127.0.0.1", "localhost", "::1"))
    assert reachable_from_elsewhere(True, "127.0.0.1") and reachable_from_elsewhere(False, "192.168.1.5")


def test_listening_for_other_machines_asks_for_a_login_like_a_share_link(start_app):
    server = start_app("--host", "0.0.0.0")  # Lightning AI's port viewer, a LAN: reachable without --share
    match = re.search(r"password: (\S+)", server.output())
    assert match, server.output()
    assert status(server.url + "/config") == 401
    assert status(server.url + "/config", login(server.url, "studio", match.group(1))) == 200


def test_only_workspace_files_are_served_and_big_uploads_are_refused(start_app, tmp_path):
    workspace = tmp_path / "workspace"
    server = start_app("--max-upload-mb", "1", workspace=workspace)
    inside = workspace / "datasets" / "note.txt"
    inside.write_text("mine")
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    assert status(f"{server.url}/gradio_api/file={inside}") == 200
    assert status(f"{server.url}/gradio_api/file={outside}") == 403
    assert status(f"{server.url}/gradio_api/file={ROOT / 'app.py'}") == 403
    assert status(f"{server.url}/gradio_api/file=/etc/passwd") == 403

    code, text = upload(server.url, None, b"x" * 2_000_000)
    assert code == 413 and "maximum allowed size" in text
    code, text = upload(server.url, None, b"x" * 1000)
    assert code == 200 and str(workspace) in text  # uploads land inside the workspace


def call_api(base: str, api_name: str, data: list) -> str:
    """One event through Gradio's HTTP API, as any client could send it; returns the event stream's text."""
    import json

    req = urllib.request.Request(f"{base}/gradio_api/call/{api_name}", data=json.dumps({"data": data}).encode(),
                                 headers={"Content-Type": "application/json"})
    event = json.loads(urllib.request.urlopen(req, timeout=30).read())["event_id"]
    return urllib.request.urlopen(f"{base}/gradio_api/call/{api_name}/{event}", timeout=120).read().decode()


def test_files_named_instead_of_uploaded_and_links_leading_out_are_refused(start_app, tmp_path):
    workspace = tmp_path / "workspace"
    server = start_app(workspace=workspace)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (workspace / "datasets" / "link.txt").symlink_to(secret)
    assert status(f"{server.url}/gradio_api/file={workspace / 'datasets' / 'link.txt'}") == 403
    named = {"path": str(secret), "meta": {"_type": "gradio.FileData"}, "orig_name": "secret.txt"}
    for api_name, data in (("separation_run_file", [named, "auto", True]),
                           ("dataset_prepare", [[named], "", "stolen", "auto", "phoneme", None, None, None, False,
                                                True])):
        assert "not uploaded by a user" in call_api(server.url, api_name, data), api_name
    out = call_api(server.url, "dataset_prepare", [None, str(secret), "stolen", "auto", "phoneme", None, None, None,
                                                  False, True])
    assert "outside the workspace" in out
    assert not (workspace / "datasets" / "stolen").exists()
