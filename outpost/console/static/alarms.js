// The alarms' count in the navigation and the states on the alarms page, kept current from
// /console/alarms.json every 2 s (no inline code: the Content-Security-Policy forbids it).
"use strict";
(function () {
  const count = document.getElementById("alarm-count");
  if (!count) return; // the login page
  const page = document.getElementById("alarms-page");
  let shown = null; // the page's states when it was drawn: a change reloads it

  function label(state) { return state.replace(/_/g, " "); }

  async function refresh() {
    let data;
    try {
      const answer = await fetch("/console/alarms.json", { credentials: "same-origin" });
      if (!answer.ok) return;
      data = await answer.json();
    } catch (e) { return; }
    count.textContent = String(data.unacknowledged);
    count.hidden = data.unacknowledged === 0;
    if (!page) return;
    const states = data.alarms.map(a => a.name + "=" + a.state).join(",");
    if (shown !== null && states !== shown && !document.querySelector("main form :focus")) {
      window.location.reload(); // buttons depend on the state: draw the page again
      return;
    }
    shown = states;
    for (const alarm of data.alarms) {
      const value = document.querySelector('[data-alarm-value="' + CSS.escape(alarm.name) + '"]');
      if (value) value.textContent = alarm.value === null ? "-" : String(alarm.value);
      const state = document.querySelector('[data-alarm="' + CSS.escape(alarm.name) + '"]');
      if (state) { state.textContent = label(alarm.state); state.className = "alarm-state " + alarm.state; }
    }
  }
  refresh();
  setInterval(refresh, 2000);
})();
