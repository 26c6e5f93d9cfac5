// delayq web: refresh each [data-refresh] section in place every few seconds (the server
// renders the fragment, escaped as the page is), and ask before a [data-confirm] form posts.
"use strict";

const REFRESH_MS = 5000;

async function refresh(section) {
  try {
    const response = await fetch(section.dataset.refresh, { credentials: "same-origin" });
    if (!response.ok) return;
    const html = await response.text();
    const fragment = new DOMParser().parseFromString(html, "text/html").body;
    // A message the operator expanded stays expanded across refreshes.
    const opened = [...section.querySelectorAll("details[id][open]")].map((d) => d.id);
    section.replaceChildren(...fragment.childNodes);
    opened.forEach((id) => section.querySelector(`details#${CSS.escape(id)}`)?.setAttribute("open", ""));
  } catch (error) {
    // The server is restarting or the network is away: keep what is shown, try again later.
  }
}

function refreshSections() {
  if (document.hidden) return;
  document.querySelectorAll("[data-refresh]").forEach(refresh);
}

document.addEventListener("submit", (event) => {
  const question = event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});

setInterval(refreshSections, REFRESH_MS);
