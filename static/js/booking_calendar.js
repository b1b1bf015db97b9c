// The booking calendar: a click on a GPU's free area opens the booking form at the half hour clicked.
// Without JavaScript the same link opens the form for that GPU from the next half hour.
document.addEventListener("click", (event) => {
  const free = event.target.closest("a.lane-free");
  const calendar = free && free.closest(".calendar");
  if (!calendar || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
  const weekStart = Number(calendar.dataset.weekStartMs);
  const weekEnd = Number(calendar.dataset.weekEndMs);
  const grid = Number(calendar.dataset.gridMs);
  const box = free.getBoundingClientRect();
  const fraction = Math.min(Math.max((event.clientX - box.left) / box.width, 0), 1);
  const slot = Math.floor((weekStart + fraction * (weekEnd - weekStart)) / grid) * grid;
  const url = new URL(free.href, window.location.href);
  url.searchParams.set("start", new Date(slot).toISOString());
  event.preventDefault();
  window.location.assign(url.toString());
});
