() => {
  // Log boxes stay pinned to their newest line unless the user scrolls up to read older ones.
  setInterval(() => {
    document.querySelectorAll(".log-box textarea").forEach((box) => {
      if (!box.dataset.watched) {
        box.dataset.watched = "1";
        box.dataset.pinned = "1";
        box.addEventListener("scroll", () => {
          box.dataset.pinned = box.scrollTop + box.clientHeight >= box.scrollHeight - 40 ? "1" : "0";
        });
      }
      if (box.dataset.pinned === "1") box.scrollTop = box.scrollHeight;
    });
  }, 500);
}
