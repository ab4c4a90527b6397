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

  // The open tab is kept in the address (#training) and in this browser: a reload opens it again instead of the
  // Dataset tab. Only the studio's own tabs count (not a tab row inside a tab, such as Music removal's).
  const KEY = "amharic-tts-tab", SETTLE_MS = 1500;
  // A studio tab's id: its button's data-tab-id, or, for a tab in the "More tabs" menu Gradio opens on a narrow
  // screen (a phone), whose buttons carry the label alone, the id webui/app.py makes of that label.
  const studioTabId = (el) => {
    const button = el && el.closest ? el.closest("button") : null;
    if (!button || button.closest('[role="tabpanel"]')) return null;
    if (button.dataset.tabId) return button.dataset.tabId;
    return button.closest(".overflow-dropdown") ? button.textContent.trim().toLowerCase().replace(/ /g, "-") : null;
  };
  document.addEventListener("click", (event) => {
    const id = studioTabId(event.target);
    if (!id) return;
    // A toast says what a tab's action did; on another tab it read as that tab's (a G2P warning over Training).
    // The tab that made it keeps the words in a box (says_errors), so it can go.
    document.querySelectorAll('button[data-testid="toast-close"]').forEach((close) => close.click());
    history.replaceState(null, "", "#" + encodeURIComponent(id));
    try { localStorage.setItem(KEY, id); } catch (e) { /* storage off: the address keeps it */ }
  }, true);
  let wanted = decodeURIComponent(location.hash.slice(1));
  try { wanted = wanted || localStorage.getItem(KEY) || ""; } catch (e) { /* storage off */ }
  if (wanted) {
    // The tab buttons appear once Gradio has drawn the page; the click waits a little longer, until Gradio's own
    // first events (the first tab's select, the page's loads) are out: a tab opened in their midst could keep
    // its live timers off.
    const started = Date.now();
    let seen = 0;
    const reopen = setInterval(() => {
      const button = [...document.querySelectorAll("button[data-tab-id], .overflow-dropdown button")]
        .find((b) => studioTabId(b) === wanted);
      seen = button ? seen || Date.now() : 0;
      if (button && Date.now() - seen >= SETTLE_MS) {
        if (button.getAttribute("aria-selected") !== "true") button.click();  // Gradio's own select runs
        clearInterval(reopen);
      }
      if (Date.now() - started > 15000) clearInterval(reopen);
    }, 100);
  }
}
