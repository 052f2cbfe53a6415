// hermes-host console: sends chat messages without reloading the page and follows the host's
// Server-Sent Events (chat messages, session changes, a process's output). The pages work
// without it: forms post and the server answers with a page.
"use strict";

(function () {
  const log = document.getElementById("chat-log");
  if (log) chat(log);
  const out = document.getElementById("proc-output");
  if (out && out.dataset.events) follow(out);

  function chat(log) {
    const status = document.getElementById("chat-session");
    const problem = document.getElementById("chat-error");
    const text = document.getElementById("say-text");
    let session = log.dataset.session;

    const near = () => log.scrollHeight - log.scrollTop - log.clientHeight < 80;
    const bottom = () => { log.scrollTop = log.scrollHeight; };
    bottom();

    function add(li, stick) {
      const empty = log.querySelector(".empty");
      if (empty) empty.remove();
      log.appendChild(li);
      if (stick) bottom();
    }

    function message(m) {
      if (log.querySelector('[data-seq="' + m.seq + '"]')) return;
      const stick = near() || !m.from_host;
      const li = document.createElement("li");
      li.className = "msg " + (m.from_host ? "host" : "you");
      li.dataset.seq = m.seq;
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = m.from_host ? "hermes" : "you";
      const time = document.createElement("time");
      time.textContent = m.time;
      li.append(who, " ", time);
      if (m.parts > 1) {
        const part = document.createElement("span");
        part.className = "part";
        part.textContent = " part " + m.part + "/" + m.parts;
        li.append(part);
      }
      const p = document.createElement("p");
      p.className = "text";
      p.textContent = m.text;
      li.append(p);
      add(li, stick);
    }

    function moved(s) {
      if (session) {
        const li = document.createElement("li");
        li.className = "divider";
        li.textContent = s.change + " (session " + s.id + ")";
        add(li, near());
      }
      session = s.id;
      status.textContent = "";
      const a = document.createElement("a");
      a.href = log.dataset.sessionLink + encodeURIComponent(s.id);
      a.textContent = s.id;
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = s.created_by;
      status.append("Session ", a, " ", badge, " generation " + s.generation);
    }

    const url = log.dataset.events + "?after=" + encodeURIComponent(log.dataset.after) +
      "&session=" + encodeURIComponent(session || "");
    const events = new EventSource(url);
    events.addEventListener("message", (e) => message(JSON.parse(e.data)));
    events.addEventListener("session", (e) => moved(JSON.parse(e.data)));

    document.querySelectorAll("form[data-chat]").forEach((form) => {
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        const body = new URLSearchParams(new FormData(form));
        const buttons = form.querySelectorAll("button");
        buttons.forEach((b) => { b.disabled = true; });
        problem.textContent = "";
        fetch(form.action, { method: "POST", body: body, credentials: "same-origin", headers: { Accept: "application/json" } })
          .then((r) => r.json().catch(() => ({ ok: false, error: "the host answered " + r.status })))
          .then((j) => {
            if (!j.ok) { problem.textContent = j.error || "not sent"; return; }
            if (form.contains(text)) text.value = "";
          })
          .catch((err) => { problem.textContent = "not sent: " + err.message; })
          .finally(() => { buttons.forEach((b) => { b.disabled = false; }); if (form.contains(text)) text.focus(); });
      });
    });

    if (text) {
      text.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          text.form.requestSubmit();
        }
      });
    }
  }

  // follow appends a running process's output as it is written, keeping the last 64 KiB.
  function follow(out) {
    const state = document.getElementById("proc-state");
    const outcome = document.getElementById("proc-outcome");
    const keep = 64 << 10;
    const events = new EventSource(out.dataset.events + "?after=" + encodeURIComponent(out.dataset.next));
    events.addEventListener("output", (e) => {
      const ev = JSON.parse(e.data);
      const stick = out.scrollHeight - out.scrollTop - out.clientHeight < 40;
      let s = (ev.reset ? "" : out.textContent) + ev.text;
      if (s.length > keep) s = s.slice(s.length - keep);
      out.textContent = s;
      if (stick) out.scrollTop = out.scrollHeight;
    });
    events.addEventListener("end", (e) => {
      state.textContent = JSON.parse(e.data).state;
    });
    // What became of the completion notice, as it settles; the stream then ends.
    events.addEventListener("outcome", (e) => {
      const ev = JSON.parse(e.data);
      const badge = document.createElement("span");
      badge.className = "badge " + ({ delivered: "ok", dropped: "bad", failed: "bad" }[ev.state] || "warn");
      badge.textContent = ev.state;
      outcome.textContent = "";
      outcome.append(badge, " " + ev.detail);
      if (["delivered", "dropped", "failed", "suppressed", "none"].includes(ev.state)) events.close();
    });
  }
})();
