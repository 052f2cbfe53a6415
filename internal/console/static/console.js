// hermes-host console: sends chat messages without reloading the page, follows the host's
// Server-Sent Events (chat messages, session changes, a process's output, changes of the lists)
// and shows whether it is connected. The pages work without it: forms post and the server
// answers with a page.
"use strict";

(function () {
  const prefix = document.body.dataset.prefix || "/console/";
  const conn = document.getElementById("conn");
  const here = () => location.pathname + location.search;

  // indicate shows the connection's state in the header: ok, bad (lost) or warn (connecting).
  function indicate(state, text) {
    if (!conn) return;
    conn.hidden = false;
    conn.className = "conn " + state;
    conn.dataset.state = state;
    conn.textContent = text;
  }

  // toLogin takes the browser to the login page, which says the session ended and brings the
  // operator back here.
  function toLogin(login) {
    indicate("bad", "The console session ended: to the login page…");
    location.assign(login || prefix + "login?ended=1&next=" + encodeURIComponent(here()));
  }

  // loginOf is the login page a 401 answer names.
  function loginOf(r) {
    return r.json().then((j) => j.login, () => undefined);
  }

  // stream follows the event stream at url() with handlers (by event name). When it breaks, it
  // closes it and asks the host whether the session lives (GET session), after 1 s, then 2, 4 …
  // up to 15 s: a host that does not answer is asked again; a 401 (the host restarted and
  // forgot the session, or it expired) leads to the login page; a live session opens the stream
  // again at url(), which says where to resume.
  function stream(url, handlers) {
    let es = null;
    let delay = 1000;
    let timer = null;
    let lost = false;
    let closed = false;
    function open() {
      if (closed) return;
      es = new EventSource(url());
      es.addEventListener("open", () => {
        delay = 1000;
        indicate("ok", lost ? "Connected again" : "Live");
        lost = false;
      });
      for (const [name, fn] of Object.entries(handlers)) es.addEventListener(name, fn);
      es.addEventListener("error", () => {
        if (closed) return;
        es.close();
        lost = true;
        indicate("bad", "Connection to the host lost: reconnecting…");
        retry();
      });
    }
    function retry() {
      clearTimeout(timer);
      timer = setTimeout(probe, delay);
      delay = Math.min(delay * 2, 15000);
    }
    function probe() {
      fetch(prefix + "session", { credentials: "same-origin", cache: "no-store" })
        .then((r) => {
          if (r.status === 401) return loginOf(r).then(toLogin);
          if (r.ok) return open();
          indicate("bad", "Connection to the host lost: it answered " + r.status + "; trying again…");
          retry();
        })
        .catch(() => {
          indicate("bad", "Connection to the host lost: no answer; trying again in " + Math.round(delay / 1000) + " s");
          retry();
        });
    }
    open();
    return { close() { closed = true; clearTimeout(timer); if (es) es.close(); } };
  }

  const log = document.getElementById("chat-log");
  if (log) chat(log);
  const out = document.getElementById("proc-output");
  if (out && out.dataset.events) follow(out);
  const live = document.getElementById("live");
  if (live && live.dataset.live) liveList(live);

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
      who.textContent = m.from_host ? "hermes" : (m.user || "you");
      const time = document.createElement("time");
      time.textContent = m.time;
      li.append(who, " ", time);
      if (m.via) {
        const via = document.createElement("span");
        via.className = "part";
        const code = document.createElement("code");
        code.textContent = m.via;
        via.append(" via ", code);
        li.append(via);
      }
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

    // Where the stream resumes: after the last message shown, in the chat's numbering (epoch).
    let after = log.dataset.after;
    let epoch = log.dataset.epoch;
    const url = () => log.dataset.events + "?after=" + encodeURIComponent(after) + "&epoch=" + encodeURIComponent(epoch) +
      "&session=" + encodeURIComponent(session || "");
    stream(url, {
      epoch: (e) => {
        const now = JSON.parse(e.data).epoch;
        if (now === epoch) return;
        // The host restarted: its chat numbers from 1 again, and the stream starts over.
        log.querySelectorAll("[data-seq]").forEach((li) => { li.dataset.oldSeq = li.dataset.seq; delete li.dataset.seq; });
        const li = document.createElement("li");
        li.className = "divider";
        li.textContent = "The host restarted: the messages above are from before";
        add(li, near());
        epoch = now;
        after = 0;
      },
      message: (e) => {
        const m = JSON.parse(e.data);
        message(m);
        after = m.seq;
      },
      session: (e) => moved(JSON.parse(e.data)),
    });

    document.querySelectorAll("form[data-chat]").forEach((form) => {
      form.addEventListener("submit", (e) => {
        e.preventDefault();
        const body = new URLSearchParams(new FormData(form));
        const buttons = form.querySelectorAll("button");
        buttons.forEach((b) => { b.disabled = true; });
        problem.textContent = "";
        fetch(form.action, { method: "POST", body: body, credentials: "same-origin", headers: { Accept: "application/json" } })
          .then((r) => {
            if (r.status === 401) return loginOf(r).then((login) => { toLogin(login); return { ok: false, error: "the console session ended" }; });
            return r.json().catch(() => ({ ok: false, error: "the host answered " + r.status }));
          })
          .then((j) => {
            if (!j.ok) { problem.textContent = j.error || "not sent"; return; }
            if (form.contains(text)) text.value = "";
          })
          .catch((err) => { problem.textContent = "not sent: the host does not answer (" + err.message + ")"; })
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
    let next = out.dataset.next;
    let events = null;
    const handlers = {};
    handlers.output = (e) => {
      const ev = JSON.parse(e.data);
      next = ev.next;
      const stick = out.scrollHeight - out.scrollTop - out.clientHeight < 40;
      let s = (ev.reset ? "" : out.textContent) + ev.text;
      if (s.length > keep) s = s.slice(s.length - keep);
      out.textContent = s;
      if (stick) out.scrollTop = out.scrollHeight;
    };
    handlers.end = (e) => {
      state.textContent = JSON.parse(e.data).state;
      const kill = document.getElementById("kill-form");
      if (kill) {
        const dd = kill.closest("dd");
        dd.previousElementSibling.remove(); // nothing left to kill
        dd.remove();
      }
    };
    // What became of the completion notice, as it settles; the stream then ends.
    handlers.outcome = (e) => {
      const ev = JSON.parse(e.data);
      const badge = document.createElement("span");
      badge.className = "badge " + ({ delivered: "ok", dropped: "bad", failed: "bad" }[ev.state] || "warn");
      badge.textContent = ev.state;
      outcome.textContent = "";
      outcome.append(badge, " " + ev.detail);
      if (["delivered", "dropped", "failed", "suppressed", "none"].includes(ev.state)) events.close();
    };
    events = stream(() => out.dataset.events + "?after=" + encodeURIComponent(next), handlers);
  }

  // liveList keeps a list page current: when the host says its data changed, the page is fetched
  // again and its list (#live) swapped in, keeping the scroll position and the focus's place.
  function liveList(live) {
    let busy = false;
    let again = false;
    function refresh() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(here(), { credentials: "same-origin", cache: "no-store", headers: { Accept: "text/html" } })
        .then((r) => {
          if (r.status === 401 || (r.redirected && new URL(r.url).pathname === prefix + "login")) return toLogin(r.redirected ? r.url : undefined);
          if (!r.ok) return;
          return r.text().then((html) => {
            const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
            if (!fresh) return;
            const open = [...live.querySelectorAll("details[open]")].map((d) => d.closest("[data-id]") && d.closest("[data-id]").dataset.id);
            live.replaceChildren(...fresh.childNodes);
            live.dataset.fp = fresh.dataset.fp;
            live.querySelectorAll("[data-id]").forEach((row) => {
              if (open.includes(row.dataset.id)) row.querySelectorAll("details").forEach((d) => { d.open = true; });
            });
            live.dispatchEvent(new CustomEvent("updated"));
          });
        })
        .catch(() => {})
        .finally(() => { busy = false; if (again) { again = false; refresh(); } });
    }
    stream(() => live.dataset.live + "?src=" + encodeURIComponent(live.dataset.src || here()) + "&fp=" + encodeURIComponent(live.dataset.fp || ""),
      { changed: (e) => { if (JSON.parse(e.data).fp !== live.dataset.fp) refresh(); } });
  }
})();
