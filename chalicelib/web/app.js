// sagegate's web page: pick, drop, paste or photograph an image; the page shrinks it to the
// model's own resize rule (GET models/<name>), encodes it losslessly and POSTs the bytes raw;
// it shows the top-k, the bytes sent against the original's and the server's Server-Timing.
// Plain script, no build step, no third-party code; every URL is relative to the API's root
// (the folder above this script), so the page works under an API Gateway stage (/api/).
"use strict";

(() => {
  const SCRIPT_URL = document.currentScript ? document.currentScript.src : document.baseURI;
  const ROOT = new URL("../", SCRIPT_URL);
  const api = (path) => new URL(path, ROOT);

  // What the API reads as a raw upload (and so may be sent untouched).
  const SENDABLE = new Set(["image/jpeg", "image/png", "image/webp"]);
  const MAX_UNREADABLE_BYTES = 6 * 1024 * 1024; // Lambda's request limit
  const KEY_STORAGE = "sagegate.apiKey";
  const IMAGE_PIPELINE = "image-classification";

  const $ = (id) => document.getElementById(id);
  const el = {
    boot: $("boot"), pick: $("pick"), file: $("file"), camera: $("camera"),
    cameraFile: $("camera-file"), k: $("k"), model: $("model"), modelField: $("model-field"),
    keyDetails: $("key-details"), apiKey: $("api-key"), previewPanel: $("preview-panel"),
    preview: $("preview"), previewCaption: $("preview-caption"), status: $("status"),
    error: $("error"), errorCode: $("error-code"), errorMessage: $("error-message"),
    predictions: $("predictions"), facts: $("facts"), sent: $("sent"),
    original: $("original"), answered: $("answered"), timingBlock: $("timing-block"),
    timing: $("timing"),
  };

  const state = {
    models: [], // image models, as GET models describes them
    defaultModel: null, // the model POST predict serves
    rules: new Map(), // model name -> its "image" block (GET models/<name>)
    file: null, // the image chosen
    prepared: null, // {model, blob, type, ...} what is sent for state.file
    run: 0, // the current request's number: older answers are dropped
    controller: null, // aborts the request in flight when another starts
    previewUrl: null,
  };

  class PageError extends Error {
    constructor(code, message) {
      super(message);
      this.code = code;
    }
  }

  // ---------------------------------------------------------------- API calls

  function apiKey() {
    return el.apiKey.value.trim();
  }

  function headers(extra) {
    const all = {...extra};
    if (apiKey()) all["x-api-key"] = apiKey();
    return all;
  }

  async function readAnswer(response) {
    const text = await response.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = null;
    }
    if (!response.ok) {
      const code = (body && (body.Code || body.code)) || `HTTP ${response.status}`;
      let message = (body && (body.Message || body.message)) || text.slice(0, 300) ||
        response.statusText || "The API refused the request.";
      if ((response.status === 401 || response.status === 403) && !(body && body.Code)) {
        message += apiKey() ? " (check the API key below)." : " (this stage may need an API key: enter it below).";
        el.keyDetails.open = true;
      }
      throw new PageError(code, message);
    }
    if (body === null) throw new PageError("InvalidAnswer", "The API's answer is not JSON.");
    return body;
  }

  async function getJson(path, signal) {
    let response;
    try {
      response = await fetch(api(path), {headers: headers({Accept: "application/json"}),
                                         cache: "no-store", signal});
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new PageError("NetworkError", `Could not reach the API (${error.message}).`);
    }
    return readAnswer(response);
  }

  async function loadModels() {
    const listing = await getJson("models");
    state.models = (listing.models || []).filter((model) => model.pipeline === IMAGE_PIPELINE);
    state.defaultModel = listing.default || null;
    const previous = el.model.value;
    el.model.replaceChildren(...state.models.map((model) => {
      const option = document.createElement("option");
      option.value = model.name;
      option.textContent = model.name + (model.name === state.defaultModel ? " (default)" : "");
      return option;
    }));
    const names = state.models.map((model) => model.name);
    if (names.includes(previous)) el.model.value = previous;
    else if (names.includes(state.defaultModel)) el.model.value = state.defaultModel;
    el.modelField.hidden = state.models.length < 2;
    if (!state.models.length) {
      throw new PageError("NoImageModel", "This API serves no image-classification model.");
    }
  }

  function currentModel() {
    return el.model.value || state.defaultModel;
  }

  async function ruleFor(name) {
    if (!state.rules.has(name)) {
      const described = await getJson(`models/${encodeURIComponent(name)}`);
      if (!described.image || !described.image.resize) {
        throw new PageError("NoImageModel", `Model ${name} takes no images.`);
      }
      state.rules.set(name, described.image);
    }
    return state.rules.get(name);
  }

  // ---------------------------------------------------------------- shrinking

  // The size the server would resize to, and the centred crop fill takes first: the same
  // arithmetic as chalicelib/imaging.py's ResizePlan, so that the server's own resize of what
  // the page sends is a no-op.
  function planFor(width, height, resize) {
    const up = Boolean(resize.upscale);
    const scaled = (length, scale) => Math.max(1, Math.round(length * scale));
    const cap = (scale) => (up ? scale : Math.min(scale, 1));
    const whole = {sx: 0, sy: 0, sw: width, sh: height};
    const boxW = resize.width;
    const boxH = resize.height;
    switch (resize.mode) {
      case "shorter-side": {
        const scale = cap(resize.shorter_side / Math.min(width, height));
        return {...whole, width: scaled(width, scale), height: scaled(height, scale)};
      }
      case "fit": {
        const scale = cap(Math.min(boxW / width, boxH / height));
        return {...whole, width: scaled(width, scale), height: scaled(height, scale)};
      }
      case "stretch":
        return {...whole, width: scaled(width, cap(boxW / width)),
                height: scaled(height, cap(boxH / height))};
      case "fill": {
        const scale = cap(Math.max(boxW / width, boxH / height));
        const sw = Math.min(width, scaled(boxW, 1 / scale));
        const sh = Math.min(height, scaled(boxH, 1 / scale));
        return {sx: Math.floor((width - sw) / 2), sy: Math.floor((height - sh) / 2), sw, sh,
                width: Math.min(boxW, scaled(width, scale)),
                height: Math.min(boxH, scaled(height, scale))};
      }
      default:
        return null; // a rule this page does not know: the server resizes
    }
  }

  // Decode with EXIF orientation applied and no colour conversion (the server and the model
  // read the pixel values as stored). Falls back to an <img> where createImageBitmap lacks
  // the options; null when the browser cannot read the file as an image.
  async function decode(file) {
    if (typeof createImageBitmap === "function") {
      try {
        return await createImageBitmap(file, {imageOrientation: "from-image",
                                              colorSpaceConversion: "none"});
      } catch {
        // not an image this way: try an <img>
      }
    }
    const url = URL.createObjectURL(file);
    try {
      const image = new Image();
      image.src = url;
      await image.decode();
      return image;
    } catch {
      return null;
    } finally {
      URL.revokeObjectURL(url);
    }
  }

  function sizeOf(source) {
    return {width: source.naturalWidth || source.width, height: source.naturalHeight || source.height};
  }

  function canvasOf(width, height) {
    if (typeof OffscreenCanvas === "function") return new OffscreenCanvas(width, height);
    const canvas = document.createElement("canvas");
    canvas.width = width;
    canvas.height = height;
    return canvas;
  }

  function toBlob(canvas, type, quality) {
    if (canvas.convertToBlob) return canvas.convertToBlob({type, quality}).catch(() => null);
    return new Promise((resolve) => canvas.toBlob(resolve, type, quality));
  }

  // A WebP is lossless when its image data is a VP8L chunk (not "VP8 ", the lossy one).
  async function isLosslessWebp(blob) {
    const bytes = new Uint8Array(await blob.arrayBuffer());
    const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
    if (bytes.length < 20 || tag(0) !== "RIFF" || tag(8) !== "WEBP") return false;
    for (let at = 12; at + 8 <= bytes.length;) {
      const kind = tag(at);
      if (kind === "VP8L") return true;
      if (kind === "VP8 ") return false;
      const size = bytes[at + 4] | (bytes[at + 5] << 8) | (bytes[at + 6] << 16) | (bytes[at + 7] << 24);
      at += 8 + size + (size & 1);
    }
    return false;
  }

  // Lossless only: PNG, or WebP where the browser writes lossless WebP (quality 1), whichever
  // is smaller.
  async function encodeLossless(canvas) {
    const png = await toBlob(canvas, "image/png");
    const webp = await toBlob(canvas, "image/webp", 1);
    if (webp && webp.type === "image/webp" && (!png || webp.size < png.size) &&
        await isLosslessWebp(webp)) {
      return webp;
    }
    return png;
  }

  async function prepare(file, rule) {
    const started = performance.now();
    const source = await decode(file);
    // the bytes are read once: k can change without another shrink, and a body that is an
    // ArrayBuffer has its length (and bytes) in the browser's network log, a Blob's has not
    const done = async (what) => ({...what, bytes: await what.blob.arrayBuffer(),
                                   prepareMs: performance.now() - started});
    if (source === null) {
      if (file.size > MAX_UNREADABLE_BYTES) {
        throw new PageError("NotAnImage", `This browser cannot open ${file.name || "the file"} ` +
          `as an image, and at ${formatBytes(file.size)} it is too large to send as it is.`);
      }
      // let the server judge what the browser cannot read (its Code and Message are shown)
      return done({blob: file, type: file.type || "application/octet-stream", how: "unreadable"});
    }
    const {width, height} = sizeOf(source);
    const original = {width, height};
    const plan = planFor(width, height, rule.resize);
    const untouched = !plan || (plan.width === width && plan.height === height &&
                                plan.sw === width && plan.sh === height);
    const sendable = SENDABLE.has(file.type);
    if (untouched && sendable && (file.type === "image/jpeg" || !plan)) {
      close(source);
      return done({blob: file, type: file.type, how: "small", original, sent: original});
    }
    const target = plan || {sx: 0, sy: 0, sw: width, sh: height, width, height};
    const canvas = canvasOf(target.width, target.height);
    const context = canvas.getContext("2d", {alpha: false});
    context.imageSmoothingEnabled = true;
    context.imageSmoothingQuality = "high";
    context.drawImage(source, target.sx, target.sy, target.sw, target.sh,
                      0, 0, target.width, target.height);
    close(source);
    const blob = await encodeLossless(canvas);
    const sent = {width: target.width, height: target.height};
    if (!blob || (sendable && blob.size >= file.size)) {
      if (!sendable) throw new PageError("EncodeFailed", "This browser could not encode the image.");
      return done({blob: file, type: file.type, how: "smaller", original, sent: original});
    }
    return done({blob, type: blob.type, how: "shrunk", original, sent});
  }

  function close(source) {
    if (source && typeof source.close === "function") source.close();
  }

  // ---------------------------------------------------------------- predicting

  async function predict(prepared, k, model, signal) {
    const path = model === state.defaultModel || !model
      ? `predict?k=${k}` : `models/${encodeURIComponent(model)}/predict?k=${k}`;
    const started = performance.now();
    let response;
    try {
      response = await fetch(api(path), {
        method: "POST", body: prepared.bytes, cache: "no-store", signal,
        headers: headers({"Content-Type": prepared.type, Accept: "application/json"}),
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new PageError("NetworkError", `Could not reach the API (${error.message}).`);
    }
    const timing = response.headers.get("Server-Timing");
    const body = await readAnswer(response);
    return {body, timing, roundTripMs: performance.now() - started};
  }

  // Run the whole chain for the chosen file; reuse the shrunk image when only k changed.
  async function run() {
    if (!state.file) return;
    const number = ++state.run;
    if (state.controller) state.controller.abort();
    const controller = new AbortController();
    state.controller = controller;
    const current = () => number === state.run;
    clearError();
    try {
      if (!state.models.length) await loadModels(); // the page's first call failed: retry
      if (!current()) return;
      const model = currentModel();
      const k = Number(el.k.value);
      let prepared = state.prepared;
      if (!prepared || prepared.model !== model || prepared.file !== state.file) {
        setStatus("Preparing the image…", true);
        const rule = await ruleFor(model);
        prepared = {...await prepare(state.file, rule), model, file: state.file};
        if (!current()) return;
        state.prepared = prepared;
      }
      setStatus(`Sending ${formatBytes(prepared.blob.size)}…`, true);
      showFacts(prepared, null);
      const answer = await predict(prepared, k, model, controller.signal);
      if (!current()) return;
      showResults(prepared, answer);
    } catch (error) {
      if (!current() || error.name === "AbortError") return;
      showError(error);
    }
  }

  // ---------------------------------------------------------------- rendering

  function formatBytes(bytes) {
    if (bytes >= 1e6) return `${(bytes / 1e6).toFixed(2)} MB`;
    if (bytes >= 1e3) return `${(bytes / 1e3).toFixed(1)} kB`;
    return `${bytes} bytes`;
  }

  function formatPercent(probability) {
    const percent = probability * 100;
    if (percent > 0 && percent < 0.1) return "<0.1%";
    return `${percent.toFixed(1)}%`;
  }

  function kindOf(type) {
    const short = (type || "").replace(/^image\//, "").toUpperCase();
    return short || "unknown type";
  }

  function setStatus(text, busy) {
    el.status.textContent = text;
    document.getElementById("live").setAttribute("aria-busy", busy ? "true" : "false");
    if (busy) el.predictions.replaceChildren();
  }

  function clearError() {
    el.error.hidden = true;
    el.errorCode.textContent = "";
    el.errorMessage.textContent = "";
  }

  function showError(error) {
    const code = error.code || error.name || "Error";
    el.errorCode.textContent = `${code}:`;
    el.errorMessage.textContent = error.message || String(error);
    el.error.hidden = false;
    el.predictions.replaceChildren();
    setStatus("No result.", false);
  }

  function showFacts(prepared, answer) {
    const file = state.file;
    const dims = (size) => (size ? `, ${size.width} × ${size.height}` : "");
    const how = {
      shrunk: "shrunk in this browser to the model's input size",
      small: "the original, already small",
      smaller: "the original, smaller than a lossless copy",
      unreadable: "the file as it is: this browser cannot read it as an image",
    }[prepared.how];
    el.sent.textContent = `${formatBytes(prepared.blob.size)}, ${kindOf(prepared.type)}` +
      `${dims(prepared.sent)} (${how})`;
    el.original.textContent = `${formatBytes(file.size)}, ${kindOf(file.type)}${dims(prepared.original)}`;
    el.answered.textContent = answer
      ? `${answer.endpoint || "?"}${answer.variant ? ` (variant ${answer.variant})` : ""}` +
        `${answer.request_id ? `, request ${answer.request_id}` : ""}`
      : "…";
    el.facts.hidden = false;
  }

  function parseServerTiming(header) {
    if (!header) return [];
    return header.split(",").map((entry) => {
      const [name, ...params] = entry.trim().split(";");
      const duration = params.map((param) => param.trim())
        .find((param) => param.startsWith("dur="));
      return {name: name.trim(), ms: duration ? Number(duration.slice(4)) : NaN};
    }).filter((stage) => stage.name);
  }

  function timingRow(name, where, ms) {
    const row = document.createElement("tr");
    for (const [text, numeric] of [[name, false], [where, false],
                                   [Number.isFinite(ms) ? ms.toFixed(1) : "–", true]]) {
      const cell = document.createElement("td");
      cell.textContent = text;
      if (numeric) cell.className = "num";
      row.append(cell);
    }
    return row;
  }

  function showResults(prepared, answer) {
    const predictions = answer.body.predictions || [];
    const items = predictions.map((prediction) => {
      const item = document.createElement("li");
      item.className = "prediction";
      const label = document.createElement("span");
      label.className = "label";
      label.textContent = prediction.label ?? String(prediction.index);
      const percent = document.createElement("span");
      percent.className = "pct";
      percent.textContent = formatPercent(prediction.probability);
      const bar = document.createElement("div");
      bar.className = "bar";
      bar.setAttribute("aria-hidden", "true");
      const fill = document.createElement("div");
      fill.className = "fill";
      fill.style.width = `${Math.max(0, Math.min(1, prediction.probability)) * 100}%`;
      bar.append(fill);
      item.append(label, " ", percent, bar);
      return item;
    });
    el.predictions.replaceChildren(...items);
    const top = predictions[0];
    setStatus(top ? `Top ${predictions.length}: most likely ${top.label ?? top.index}, ` +
      `${formatPercent(top.probability)}.` : "The model gave no classes.", false);
    showFacts(prepared, answer.body);
    const rows = parseServerTiming(answer.timing).map((stage) => timingRow(stage.name, "server", stage.ms));
    rows.unshift(timingRow("shrink", "browser", prepared.prepareMs));
    rows.push(timingRow("round trip", "browser", answer.roundTripMs));
    el.timing.replaceChildren(...rows);
    el.timingBlock.hidden = false;
  }

  function showPreview(file) {
    if (state.previewUrl) URL.revokeObjectURL(state.previewUrl);
    state.previewUrl = URL.createObjectURL(file);
    el.preview.alt = `The image chosen: ${file.name || "pasted image"}`;
    el.preview.src = state.previewUrl;
    el.previewCaption.textContent = `${file.name || "Pasted image"}, ${formatBytes(file.size)}`;
    el.previewPanel.hidden = false;
  }

  // ---------------------------------------------------------------- input

  function choose(file) {
    if (!file) return;
    state.file = file;
    state.prepared = null;
    showPreview(file);
    run();
  }

  function firstImageFile(list) {
    const files = Array.from(list || []);
    return files.find((file) => file.type.startsWith("image/")) || files[0] || null;
  }

  function fillK() {
    el.k.replaceChildren(...Array.from({length: 10}, (_, index) => {
      const option = document.createElement("option");
      option.value = String(index + 1);
      option.textContent = String(index + 1);
      return option;
    }));
    el.k.value = "5";
  }

  function setDefaultK() {
    const model = state.models.find((each) => each.name === currentModel());
    if (model && model.default_k) el.k.value = String(Math.min(10, Math.max(1, model.default_k)));
  }

  let kTouched = false;

  async function refreshModels() {
    state.rules.clear();
    try {
      await loadModels();
      if (!kTouched) setDefaultK();
      if (!state.file) setStatus("No image yet.", false);
      clearError();
    } catch (error) {
      showError(error);
    }
  }

  function wire() {
    el.pick.addEventListener("click", () => el.file.click());
    el.camera.addEventListener("click", () => el.cameraFile.click());
    for (const input of [el.file, el.cameraFile]) {
      input.addEventListener("change", () => {
        choose(input.files && input.files[0]);
        input.value = "";
      });
    }
    el.k.addEventListener("change", () => {
      kTouched = true;
      run();
    });
    el.model.addEventListener("change", () => {
      if (!kTouched) setDefaultK();
      run();
    });

    let storedKey = "";
    try {
      storedKey = sessionStorage.getItem(KEY_STORAGE) || "";
    } catch {
      storedKey = "";
    }
    el.apiKey.value = storedKey;
    el.apiKey.addEventListener("change", () => {
      try {
        if (apiKey()) sessionStorage.setItem(KEY_STORAGE, apiKey());
        else sessionStorage.removeItem(KEY_STORAGE);
      } catch {
        // storage refused (private mode): the key still works for this page
      }
      refreshModels().then(() => run());
    });

    // drop anywhere on the page; the drop zone shows it is the target
    let depth = 0;
    document.addEventListener("dragenter", (event) => {
      if (!event.dataTransfer || !Array.from(event.dataTransfer.types).includes("Files")) return;
      depth += 1;
      el.pick.classList.add("dragging");
    });
    document.addEventListener("dragleave", () => {
      depth = Math.max(0, depth - 1);
      if (!depth) el.pick.classList.remove("dragging");
    });
    document.addEventListener("dragover", (event) => {
      event.preventDefault();
      if (event.dataTransfer) event.dataTransfer.dropEffect = "copy";
    });
    document.addEventListener("drop", (event) => {
      event.preventDefault();
      depth = 0;
      el.pick.classList.remove("dragging");
      choose(firstImageFile(event.dataTransfer && event.dataTransfer.files));
    });

    document.addEventListener("paste", (event) => {
      const data = event.clipboardData;
      if (!data) return;
      const files = Array.from(data.items || [])
        .filter((item) => item.kind === "file").map((item) => item.getAsFile()).filter(Boolean);
      const file = firstImageFile(files.length ? files : data.files);
      if (file) {
        event.preventDefault();
        choose(file);
      }
    });

    el.preview.addEventListener("error", () => {
      // a file the browser cannot show (or not an image): show what was sent, if an image
      const prepared = state.prepared;
      if (prepared && prepared.how === "shrunk" && prepared.file === state.file) {
        URL.revokeObjectURL(state.previewUrl);
        state.previewUrl = URL.createObjectURL(prepared.blob);
        el.preview.src = state.previewUrl;
      } else {
        el.previewPanel.hidden = true;
      }
    });
  }

  function start() {
    el.boot.hidden = true;
    el.camera.hidden = !window.matchMedia("(pointer: coarse)").matches;
    fillK();
    wire();
    refreshModels();
  }

  start();
})();
