/**
 * Ferry web chat: files (ES2020, no build step). Loads before app.js, which drives it through
 * `window.ferryMedia`.
 *
 * In: the composer's attach button (a file picker), files dropped on the composer and images
 * pasted into it are uploaded at once to `POST /webchat/upload?name=…` (the body is the file;
 * `Authorization: Bearer <token>` when the page has one) and shown as chips with name, size and
 * a remove button. The gateway answers `{id, name, mimeType, size, width?, height?}`; app.js sends
 * the ids with `chat.send` (`attachments: [{id, name}]`). A file over the gateway's limit
 * (`hello-ok.features.uploads.maxBytes`) is refused here before any upload, and the gateway's
 * own refusals (too large, a refused type) show inline under the composer.
 *
 * Out: files on `chat` events and in `chat.history` (`files: [...]`) are fetched from
 * `GET /webchat/media/<id>` with the same header, and shown from `blob:` URLs this page made
 * (an `<img src>` cannot send the header): PNG, JPEG, GIF and WebP inline, anything else as a
 * link with its name and size that downloads it when clicked. A file no longer stored
 * (`expired`, or a 404) is a placeholder, never a broken image. No URL a message names is ever
 * loaded: only ids, only from this gateway.
 */
"use strict";

window.ferryMedia = (() => {
  /** Raster images a browser shows without running anything; the rest are download links. */
  const INLINE = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
  const ID = /^[0-9a-f]{64}$/;

  const $ = (id) => document.getElementById(id);
  let ui = null;
  /** Options from app.js: `token()` (the gateway token or null), `changed()` (composer state). */
  let opts = { token: () => null, changed: () => {} };
  /** The upload limit in bytes; `null` while the gateway takes no files (the button hides). */
  let maxBytes = null;
  /** Composer attachments: `{local, file, state: "uploading"|"ready"|"failed", info, chip}`. */
  let pending = [];
  /** Blob URLs of downloaded files, by id (a file's bytes never change under its id). */
  const blobs = new Map();

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /** A size for people: 12 KB, 1.5 MB. */
  function size(bytes) {
    if (!(bytes >= 0)) return "";
    if (bytes >= 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1).replace(/\.0$/, "")} MB`;
    return `${Math.max(1, Math.ceil(bytes / 1024))} KB`;
  }

  function headers() {
    const token = opts.token();
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  /** The gateway's JSON error message, or a fallback. */
  async function errorOf(response, fallback) {
    try {
      const body = await response.json();
      if (body && body.error && typeof body.error.message === "string") return body.error.message;
    } catch { /* not JSON */ }
    return `${fallback} (HTTP ${response.status})`;
  }

  // ---------------------------------------------------------------- composer

  function setup(options) {
    opts = { ...opts, ...options };
    ui = {
      attach: $("attach"), input: $("file-input"), tray: $("attachments"), error: $("upload-error"),
      form: $("composer-form"), composer: $("composer"),
    };
    ui.attach.addEventListener("click", () => ui.input.click());
    ui.input.addEventListener("change", () => {
      add([...ui.input.files]);
      ui.input.value = "";
    });
    ui.form.addEventListener("dragover", (ev) => {
      if (maxBytes === null || !hasFiles(ev.dataTransfer)) return;
      ev.preventDefault();
      ui.form.classList.add("dropping");
    });
    ui.form.addEventListener("dragleave", () => ui.form.classList.remove("dropping"));
    ui.form.addEventListener("drop", (ev) => {
      ui.form.classList.remove("dropping");
      if (maxBytes === null || !hasFiles(ev.dataTransfer)) return;
      ev.preventDefault();
      add([...ev.dataTransfer.files]);
    });
    ui.composer.addEventListener("paste", (ev) => {
      if (maxBytes === null || !ev.clipboardData) return;
      const images = [...ev.clipboardData.files].filter((f) => f.type.startsWith("image/"));
      if (images.length === 0) return; // text pastes as text
      ev.preventDefault();
      add(images.map((f, i) => f.name && f.name !== "image.png" ? f :
        new File([f], `pasted-${new Date().toISOString().slice(0, 19).replace(/[:T]/g, "-")}${i ? `-${i}` : ""}.${f.type.split("/")[1] || "png"}`, { type: f.type })));
    });
  }

  function hasFiles(data) {
    return Boolean(data) && [...(data.types || [])].includes("Files");
  }

  /** Whether the gateway takes files: `maxBytes` from `hello-ok`, or null. */
  function enable(limit) {
    maxBytes = typeof limit === "number" && limit > 0 ? limit : null;
    ui.attach.hidden = maxBytes === null;
  }

  function showError(text) {
    ui.error.textContent = text || "";
    ui.error.hidden = !text;
  }

  function add(files) {
    showError("");
    for (const file of files) {
      if (file.size > maxBytes) {
        showError(`"${file.name}" is ${size(file.size)}, over the ${size(maxBytes)} limit for files here.`);
        continue;
      }
      const item = { local: URL.createObjectURL(file), file, state: "uploading", info: null, chip: null };
      pending.push(item);
      item.chip = chip(item);
      ui.tray.appendChild(item.chip);
      upload(item);
    }
    ui.tray.hidden = pending.length === 0;
    opts.changed();
  }

  function chip(item) {
    const node = el("div", "attachment");
    node.dataset.state = item.state;
    if (item.file.type.startsWith("image/")) {
      const thumb = el("img", "attachment-thumb");
      thumb.alt = "";
      thumb.src = item.local;
      node.appendChild(thumb);
    } else {
      node.appendChild(el("span", "attachment-icon", "📄"));
    }
    const label = el("span", "attachment-label");
    label.append(el("span", "attachment-name", item.file.name || "file"), el("span", "attachment-size", size(item.file.size)));
    const remove = el("button", "attachment-remove", "×");
    remove.type = "button";
    remove.title = `Remove ${item.file.name || "file"}`;
    remove.setAttribute("aria-label", remove.title);
    remove.addEventListener("click", () => drop(item));
    node.append(label, remove);
    return node;
  }

  function drop(item) {
    pending = pending.filter((other) => other !== item);
    item.chip.remove();
    URL.revokeObjectURL(item.local);
    ui.tray.hidden = pending.length === 0;
    opts.changed();
  }

  async function upload(item) {
    try {
      const name = encodeURIComponent(item.file.name || "file");
      const response = await fetch(`webchat/upload?name=${name}`, { method: "POST", headers: headers(), body: item.file });
      if (!response.ok) throw new Error(await errorOf(response, "The upload failed"));
      item.info = await response.json();
      item.state = "ready";
    } catch (err) {
      item.state = "failed";
      showError(err && err.message ? err.message : "The upload failed.");
      if (pending.includes(item)) drop(item);
      return;
    }
    item.chip.dataset.state = item.state;
    opts.changed();
  }

  /** `{count, uploading}`: what the composer holds. */
  function state() {
    return { count: pending.length, uploading: pending.some((item) => item.state === "uploading") };
  }

  /**
   * The uploaded files, for a message (the tray empties): `{id, name, mimeType, size, width,
   * height, local}`, `local` the blob URL of the file itself for the user's own bubble.
   */
  function take() {
    const ready = pending.filter((item) => item.state === "ready");
    for (const item of ready) item.chip.remove();
    pending = pending.filter((item) => item.state !== "ready");
    ui.tray.hidden = pending.length === 0;
    showError("");
    return ready.map((item) => ({ ...item.info, name: item.info.name || item.file.name, local: item.local }));
  }

  // ---------------------------------------------------------------- showing files

  /** Files as the gateway describes them, checked: each has an id (or is expired) and a name or type. */
  function valid(files) {
    if (!Array.isArray(files)) return [];
    return files.filter((f) => f && typeof f === "object" &&
      ((typeof f.id === "string" && ID.test(f.id)) || f.expired === true));
  }

  /** A blob URL of file `id`, fetched once with the token. */
  function blobUrl(id) {
    if (!blobs.has(id)) {
      const fetched = fetch(`webchat/media/${id}`, { headers: headers() }).then(async (response) => {
        if (!response.ok) throw new Error(await errorOf(response, "The file cannot be fetched"));
        return URL.createObjectURL(await response.blob());
      });
      fetched.catch(() => blobs.delete(id)); // a later try may work (a reconnect, a new token)
      blobs.set(id, fetched);
    }
    return blobs.get(id);
  }

  function placeholder(file, why) {
    const node = el("div", "file file-gone");
    node.append(el("span", "file-icon", "📎"), el("span", "file-name", file.name || "file"), el("span", "file-size", why));
    return node;
  }

  /** An image shown inline once fetched; a placeholder if it cannot be. */
  function image(file) {
    const figure = el("figure", "file file-image");
    const img = el("img");
    img.alt = file.name || "image";
    if (file.width && file.height) { img.width = file.width; img.height = file.height; }
    figure.appendChild(img);
    const source = file.local ? Promise.resolve(file.local) : blobUrl(file.id);
    source.then((url) => { img.src = url; }, () => figure.replaceWith(placeholder(file, "no longer available")));
    return figure;
  }

  /** A link with the file's name and size that downloads it when clicked. */
  function link(file) {
    const a = el("a", "file file-link");
    a.href = "#";
    a.append(el("span", "file-icon", "📄"), el("span", "file-name", file.name || "file"),
      el("span", "file-size", size(file.size)));
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      const source = file.local ? Promise.resolve(file.local) : blobUrl(file.id);
      source.then((url) => {
        const save = el("a");
        save.href = url;
        save.download = file.name || file.id;
        document.body.appendChild(save);
        save.click();
        save.remove();
      }, () => a.replaceWith(placeholder(file, "no longer available")));
    });
    return a;
  }

  /** Shows `files` in message `msg`, after its text. */
  function show(msg, files) {
    const list = valid(files);
    if (list.length === 0) return;
    let box = msg.querySelector(".files");
    if (!box) {
      box = el("div", "files");
      msg.querySelector(".msg-main").insertBefore(box, msg.querySelector(".msg-meta"));
    }
    for (const file of list) {
      if (file.expired) box.appendChild(placeholder(file, "no longer available"));
      else if (INLINE.has(file.mimeType)) box.appendChild(image(file));
      else box.appendChild(link(file));
    }
  }

  return { setup, enable, state, take, show, valid };
})();
