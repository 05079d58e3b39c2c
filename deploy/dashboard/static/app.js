// ferry dashboard: copy buttons, and the upload page (drop, inspect,
// upload with progress). Nothing else runs in the page.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;

  document.addEventListener("click", (e) => {
    const b = e.target.closest("button.copy");
    if (!b) return;
    navigator.clipboard.writeText(b.dataset.copy).then(() => {
      b.textContent = "copied";
      setTimeout(() => { b.textContent = "copy"; }, 1500);
    });
  });

  const form = document.getElementById("upload");
  if (!form) return;
  const cluster = form.dataset.cluster;
  const file = document.getElementById("file");
  const drop = document.getElementById("drop");
  const result = document.getElementById("result");
  const progress = document.getElementById("progress");
  const bar = document.getElementById("bar");
  const bytes = document.getElementById("bytes");
  const rate = document.getElementById("rate");
  const phases = document.getElementById("phases");

  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) file.files = e.dataTransfer.files;
  });

  function human(n) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : Math.round(n)) + " " + u[i];
  }

  function phase(text, cls) {
    const li = document.createElement("li");
    li.textContent = text;
    if (cls) li.className = cls;
    phases.appendChild(li);
    return li;
  }

  // pick returns what to send, {body, name}: the one archive picked, or a
  // split package (ferry package split): its index PKG.parts.json and every
  // part it lists, PKG.part001, …, sent one after the other in the index's
  // order as one stream — the browser reads each file in turn, nothing is
  // joined on disk. A part missing from the pick or of another size than
  // the index records is named before anything is sent; what is sent is
  // verified by the dashboard and the agent as an archive is.
  async function pick() {
    const files = Array.from(file.files);
    if (!files.length) return fail("pick an archive first");
    const index = files.find((f) => f.name.endsWith(".parts.json"));
    if (!index) {
      if (files.length > 1) return fail("pick one archive, or a split package's parts with its .parts.json index");
      return { body: files[0], name: files[0].name };
    }
    let ps;
    try { ps = JSON.parse(await index.text()); } catch (e) { return fail(index.name + ": not a parts index"); }
    if (!ps || !Array.isArray(ps.parts) || !ps.parts.length) return fail(index.name + ": not a parts index");
    const byName = new Map(files.map((f) => [f.name, f]));
    const body = [];
    for (const [i, pt] of ps.parts.entries()) {
      const f = byName.get(pt.name);
      if (!f) return fail("part " + pt.name + " is missing (part " + (i + 1) + " of " + ps.parts.length + "): pick it too, or fetch it again");
      if (f.size !== pt.size) return fail("part " + pt.name + " is " + f.size + " bytes, " + index.name + " records " + pt.size + ": fetch it again");
      body.push(f);
    }
    return { body: new Blob(body), name: ps.package || index.name };
  }

  function fail(text) {
    phases.replaceChildren();
    progress.hidden = false;
    phase(text, "error");
    return null;
  }

  // send posts body to path, showing the bytes sent and the rate.
  function send(path, body, onText) {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", path);
    xhr.setRequestHeader("X-CSRF-Token", csrf);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    const t0 = performance.now();
    progress.hidden = false;
    phases.replaceChildren();
    bar.value = 0;
    xhr.upload.onprogress = (e) => {
      if (!e.lengthComputable) return;
      bar.value = (100 * e.loaded) / e.total;
      bytes.textContent = human(e.loaded) + " of " + human(e.total);
      const s = (performance.now() - t0) / 1000;
      if (s > 0) rate.textContent = human(e.loaded / s) + "/s";
    };
    if (onText) xhr.onprogress = () => onText(xhr.responseText, false);
    xhr.send(body);
    return xhr;
  }

  document.getElementById("inspect-btn").addEventListener("click", async () => {
    const p = await pick();
    if (!p) return;
    const xhr = send("/c/" + encodeURIComponent(cluster) + "/inspect?name=" + encodeURIComponent(p.name), p.body);
    const li = phase("reading and verifying …");
    xhr.onload = () => {
      li.textContent = xhr.status === 200 ? "inspected" : xhr.status + ": " + xhr.responseText.trim();
      if (xhr.status === 200) result.innerHTML = xhr.responseText; else li.className = "error";
    };
    xhr.onerror = () => { li.textContent = "the dashboard did not answer"; li.className = "error"; };
  });

  document.getElementById("upload-btn").addEventListener("click", async () => {
    const p = await pick();
    if (!p) return;
    const q = new URLSearchParams();
    for (const c of document.getElementById("components").value.split(",")) {
      if (c.trim()) q.append("component", c.trim());
    }
    result.replaceChildren();
    let seen = 0;
    const onText = (text, final) => {
      const lines = text.split("\n");
      const upto = final ? lines.length : lines.length - 1;
      for (; seen < upto; seen++) {
        if (!lines[seen].trim()) continue;
        let ev;
        try { ev = JSON.parse(lines[seen]); } catch (_) { continue; }
        show(ev);
      }
    };
    const xhr = send("/c/" + encodeURIComponent(cluster) + "/upload?" + q.toString(), p.body, onText);
    const waiting = phase("sending …");
    xhr.upload.onload = () => { waiting.textContent = "sent; the agent verifies it"; };
    xhr.onload = () => {
      if (xhr.status !== 200) {
        phase("refused (" + xhr.status + "): " + xhr.responseText.trim(), "error").id = "refusal";
        return;
      }
      onText(xhr.responseText, true);
    };
    xhr.onerror = () => { phase("the dashboard did not answer", "error"); };
  });

  function show(ev) {
    switch (ev.phase) {
      case "received": phase("received: " + ev.message); break;
      case "verified": phase("verified: " + ev.message); break;
      case "pushing": phase("pushing to the registry …"); break;
      case "pushed": phase("pushed: " + ev.message); break;
      case "applied": phase(ev.message); break;
      case "condition": {
        const c = ev.condition;
        phase(c.type + "=" + c.status + " " + c.reason + (c.message ? ": " + c.message : ""));
        break;
      }
      case "done": {
        const r = ev.result;
        const li = phase(r.name + " " + r.version + " Ready=" + (r.ready || "?") + " · " + r.digest + " · signed by " + (r.signedBy || []).join(", "), "done");
        li.id = "done";
        break;
      }
      case "error": phase("failed: " + ev.error, "error").id = "refusal"; break;
    }
  }
})();
