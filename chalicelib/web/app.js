// sagegate's web page: pick, drop, paste or photograph an image; the page shrinks it to the
// model's own resize rule (GET models/<name>), encodes it losslessly and POSTs the bytes raw;
// it shows the top-k, the bytes sent against the original's and the server's Server-Timing.
// What is still too large for the synchronous route (a file the browser cannot open, say)
// goes through a job: POST uploads, the file straight to S3 by the presigned POST (with
// XMLHttpRequest, whose upload progress fetch lacks), POST models/<name>/jobs, then
// GET jobs/<id> until it ends; the answer is rendered as the synchronous one is.
// A language model (pipeline "llm") chosen instead gets a chat box: POST
// v1/chat/completions with "stream": true, the answer written token by token as the
// text/event-stream's data: lines arrive (a fetch's ReadableStream), a Stop button that aborts
// the fetch, then the usage and the time to the first token.
// Plain script, no build step, no third-party code; every URL is relative to the API's root
// (the folder above this script), so the page works under an API Gateway stage (/api/).
"use strict";

(() => {
  const SCRIPT_URL = document.currentScript ? document.currentScript.src : document.baseURI;
  const ROOT = new URL("../", SCRIPT_URL);
  const api = (path) => new URL(path, ROOT);

  // What the API reads as a raw upload (and so may be sent untouched).
  const SENDABLE = new Set(["image/jpeg", "image/png", "image/webp"]);
  // The largest body sent to the synchronous route: Lambda's 6 MB request, in which API
  // Gateway base64-encodes the raw body (a third more), less room for the rest of the event
  // (sagegate.client.transfer.SYNC_LIMIT_BYTES, the Python client's same rule).
  const SYNC_LIMIT_BYTES = Math.floor((6 * 1024 * 1024 - 16 * 1024) * 3 / 4);
  const POLL_FIRST_MS = 250; // a job is read again after this, then twice as long ...
  const POLL_MAX_MS = 5000; // ... up to this, unless its Retry-After says longer
  const WAIT_MAX_MS = 3600 * 1000; // SageMaker Asynchronous Inference's longest invocation
  const KEY_STORAGE = "sagegate.apiKey";
  const IMAGE_PIPELINE = "image-classification";
  const LLM_PIPELINE = "llm";
  const CHAT_PATH = "v1/chat/completions"; // relative, as every URL here (its openai_paths entry)
  const MAX_EVENT_CHARS = 1 << 20; // a data: line longer than this is not OpenAI's stream

  const $ = (id) => document.getElementById(id);
  const el = {
    boot: $("boot"), pick: $("pick"), file: $("file"), camera: $("camera"),
    cameraFile: $("camera-file"), k: $("k"), model: $("model"), modelField: $("model-field"),
    keyDetails: $("key-details"), apiKey: $("api-key"), previewPanel: $("preview-panel"),
    preview: $("preview"), previewCaption: $("preview-caption"), status: $("status"),
    error: $("error"), errorCode: $("error-code"), errorMessage: $("error-message"),
    predictions: $("predictions"), facts: $("facts"), sent: $("sent"),
    original: $("original"), answered: $("answered"), timingBlock: $("timing-block"),
    timing: $("timing"), transfer: $("transfer"), uploadProgress: $("upload-progress"),
    uploadText: $("upload-text"), jobText: $("job-text"), main: document.querySelector("main"),
    chatLog: $("chat-log"), chatForm: $("chat-form"), chatInput: $("chat-input"),
    chatSend: $("chat-send"), chatStop: $("chat-stop"), chatClear: $("chat-clear"),
    chatStatus: $("chat-status"), chatError: $("chat-error"), chatErrorCode: $("chat-error-code"),
    chatErrorMessage: $("chat-error-message"), chatFacts: $("chat-facts"),
    chatFirst: $("chat-first"), chatTotal: $("chat-total"), chatUsage: $("chat-usage"),
    chatFinish: $("chat-finish"),
  };

  const state = {
    models: [], // image models, as GET models describes them
    llms: [], // language models (pipeline llm), offered as a chat
    chat: [], // the conversation so far: OpenAI's messages
    chatController: null, // aborts the answer being streamed (Stop)
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
      const detail = body && body.error && typeof body.error === "object" ? body.error : body;
      throw answerError(response, detail, text);
    }
    if (body === null) throw new PageError("InvalidAnswer", "The API's answer is not JSON.");
    return body;
  }

  // A refusal as a PageError: sagegate's {Code, Message}, OpenAI's {error: {code, message}}
  // (the v1 routes) or API Gateway's {message}.
  function answerError(response, body, text) {
    const code = (body && (body.Code || body.code || body.type)) || `HTTP ${response.status}`;
    let message = (body && (body.Message || body.message)) || text.slice(0, 300) ||
      response.statusText || "The API refused the request.";
    if ((response.status === 401 || response.status === 403) && !(body && (body.Code || body.type))) {
      message += apiKey() ? " (check the API key below)." : " (this stage may need an API key: enter it below).";
      el.keyDetails.open = true;
    }
    return new PageError(code, message);
  }

  async function call(path, init) {
    try {
      return await fetch(api(path), {cache: "no-store", ...init});
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new PageError("NetworkError", `Could not reach the API (${error.message}).`);
    }
  }

  async function getJson(path, signal) {
    return readAnswer(await call(path, {headers: headers({Accept: "application/json"}), signal}));
  }

  async function postJson(path, body, signal) {
    return readAnswer(await call(path, {
      method: "POST", body: JSON.stringify(body), signal,
      headers: headers({"Content-Type": "application/json", Accept: "application/json"}),
    }));
  }

  async function loadModels() {
    const listing = await getJson("models");
    const all = listing.models || [];
    state.models = all.filter((model) => model.pipeline === IMAGE_PIPELINE);
    state.llms = all.filter((model) => model.pipeline === LLM_PIPELINE && model.llm);
    state.defaultModel = listing.default || null;
    const previous = el.model.value;
    const option = (model, note) => {
      const item = document.createElement("option");
      item.value = model.name;
      item.textContent = model.name + note;
      return item;
    };
    el.model.replaceChildren(
      ...state.models.map((model) => option(model, model.name === state.defaultModel ? " (default)" : "")),
      ...state.llms.map((model) => option(model, " (chat)")));
    const names = [...state.models, ...state.llms].map((model) => model.name);
    if (names.includes(previous)) el.model.value = previous;
    else if (names.includes(state.defaultModel)) el.model.value = state.defaultModel;
    el.modelField.hidden = names.length < 2;
    showMode();
    if (!names.length) {
      throw new PageError("NoImageModel", "This API serves no image-classification model.");
    }
  }

  // The language model chosen (its GET models entry), or null for an image model.
  function chosenLlm() {
    return state.llms.find((model) => model.name === el.model.value) || null;
  }

  function showMode() {
    el.main.classList.toggle("chat-mode", Boolean(chosenLlm()));
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
    // (what goes through a job is posted as the Blob itself: a big file is not read here)
    const done = async (what) => ({
      ...what, prepareMs: performance.now() - started,
      bytes: what.blob.size <= SYNC_LIMIT_BYTES ? await what.blob.arrayBuffer() : null,
    });
    if (source === null) {
      // let the server judge what the browser cannot read (its Code and Message are shown);
      // too large to send directly, it goes through a job, where the server's limits are larger
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
      if (!current() || chosenLlm()) return; // a language model: the chat box, not an image
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
      showFacts(prepared, null);
      let answer;
      if (prepared.blob.size > SYNC_LIMIT_BYTES) {
        answer = await viaJob(prepared, k, model, controller.signal, current);
      } else {
        setStatus(`Sending ${formatBytes(prepared.blob.size)}…`, true);
        answer = await predict(prepared, k, model, controller.signal);
      }
      if (!current()) return;
      showResults(prepared, answer);
    } catch (error) {
      if (!current() || error.name === "AbortError") return;
      showError(error);
    } finally {
      if (current()) el.transfer.hidden = !state.prepared || !state.prepared.uploadId;
    }
  }

  // ---------------------------------------------------------------- jobs

  // Through a job: the upload once (a new k or model reuses it), then a job and its wait.
  async function viaJob(prepared, k, model, signal, current) {
    const started = performance.now();
    el.transfer.hidden = false;
    el.jobText.textContent = "";
    const reused = Boolean(prepared.uploadId) && prepared.uploadModel === model;
    if (!reused) {
      setStatus(`Uploading ${formatBytes(prepared.blob.size)}: too large to send directly, ` +
        "it goes to storage and runs as a job…", true);
      const presigned = await postJson("uploads", {model, content_type: prepared.type}, signal);
      await sendToStorage(presigned, prepared.blob, signal);
      prepared.uploadId = presigned.upload_id;
      prepared.uploadModel = model;
    }
    const uploadMs = performance.now() - started;
    const path = `models/${encodeURIComponent(model)}/jobs?k=${k}`;
    let job;
    try {
      job = await postJson(path, {upload_id: prepared.uploadId}, signal);
    } catch (error) {
      if (error.code !== "UploadNotFound" || !reused) throw error;
      prepared.uploadId = null; // expired or removed since it was made: upload it again
      return viaJob(prepared, k, model, signal, current);
    }
    const done = await waitFor(job.job_id, signal, current);
    const body = "result" in done ? done.result : await download(done.result_url, signal);
    return {body, timing: null, roundTripMs: performance.now() - started, uploadMs,
            jobMs: 1000 * (done.updated_at - done.created_at), jobId: done.job_id};
  }

  // The largest file a presigned POST's policy takes (its content-length-range), or null.
  function policyCap(fields) {
    try {
      const policy = JSON.parse(atob(fields.policy || ""));
      const range = (policy.conditions || []).find((condition) =>
        Array.isArray(condition) && condition[0] === "content-length-range");
      return range && Number.isFinite(range[2]) ? range[2] : null;
    } catch {
      return null;
    }
  }

  // S3's XML error (Code, Message, and the size limit it names) as a PageError, or null.
  function storageError(xml) {
    const documentOf = new DOMParser().parseFromString(xml || "", "application/xml");
    const text = (name) => (documentOf.querySelector(`Error > ${name}`)?.textContent || "").trim();
    if (!text("Code")) return null;
    const max = text("MaxSizeAllowed");
    return new PageError(text("Code"), text("Message") +
      (max ? ` (this upload takes at most ${formatBytes(Number(max))})` : ""));
  }

  function showUpload(sent, total) {
    el.uploadProgress.max = total || 1;
    el.uploadProgress.value = Math.min(sent, total || 1);
    el.uploadText.textContent = `${formatBytes(sent)} of ${formatBytes(total)} uploaded`;
  }

  // The form's fields first and the file last, as S3 requires; the API key is not sent there.
  function sendToStorage(presigned, blob, signal) {
    const cap = policyCap(presigned.fields || {});
    if (cap !== null && blob.size > cap) {
      return Promise.reject(new PageError("EntityTooLarge", `The file is ` +
        `${formatBytes(blob.size)}; this model's uploads take at most ${formatBytes(cap)}.`));
    }
    const form = new FormData();
    for (const [name, value] of Object.entries(presigned.fields || {})) form.append(name, value);
    form.append("file", blob);
    showUpload(0, blob.size);
    return new Promise((resolve, reject) => {
      const request = new XMLHttpRequest();
      request.open("POST", presigned.url);
      request.upload.addEventListener("progress", (event) =>
        showUpload(event.loaded, event.lengthComputable ? event.total : blob.size));
      request.addEventListener("load", () => {
        if (request.status >= 200 && request.status < 300) {
          showUpload(blob.size, blob.size);
          resolve();
        } else {
          reject(storageError(request.responseText) || new PageError(`HTTP ${request.status}`,
            "The storage the API uploads to refused the file."));
        }
      });
      request.addEventListener("error", () => reject(new PageError("NetworkError",
        "Could not reach the storage the API uploads to.")));
      request.addEventListener("abort", () => reject(new DOMException("Aborted", "AbortError")));
      signal.addEventListener("abort", () => request.abort(), {once: true});
      request.send(form);
    });
  }

  function pause(ms, signal) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, ms);
      signal.addEventListener("abort", () => {
        clearTimeout(timer);
        reject(new DOMException("Aborted", "AbortError"));
      }, {once: true});
    });
  }

  function retryAfterMs(response) {
    const seconds = Number(response.headers.get("Retry-After"));
    return Number.isFinite(seconds) && seconds > 0 ? Math.min(seconds, 10) * 1000 : 0;
  }

  // Read the job until it ends: 0.25 s, then twice as long each time up to 5 s.
  async function waitFor(jobId, signal, current) {
    const started = performance.now();
    let delay = POLL_FIRST_MS;
    let shown = null;
    for (;;) {
      const response = await call(`jobs/${encodeURIComponent(jobId)}`,
                                  {headers: headers({Accept: "application/json"}), signal});
      const job = await readAnswer(response);
      if (!current()) throw new DOMException("Superseded", "AbortError");
      const elapsed = performance.now() - started;
      el.jobText.textContent = `Job ${jobId}: ${job.state}, ${Math.round(elapsed / 1000)} s`;
      if (job.state !== shown) { // the live status says each new state once
        shown = job.state;
        setStatus(`Uploaded. The job is ${job.state}…`, true);
      }
      if (job.state === "succeeded") return job;
      if (job.state === "failed") {
        const error = job.error || {};
        throw new PageError(error.Code || "JobFailed", error.Message || "The job failed.");
      }
      if (elapsed > WAIT_MAX_MS) {
        throw new PageError("WaitTimeout", `Job ${jobId} is still ${job.state} after an hour.`);
      }
      await pause(Math.max(delay, retryAfterMs(response)), signal);
      delay = Math.min(delay * 2, POLL_MAX_MS);
    }
  }

  // An answer too large for the job record: a presigned GET of it (S3, not the API).
  async function download(url, signal) {
    let response;
    try {
      response = await fetch(url, {cache: "no-store", signal});
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new PageError("NetworkError", `Could not download the job's answer (${error.message}).`);
    }
    if (!response.ok) {
      const text = await response.text();
      throw storageError(text) || new PageError(`HTTP ${response.status}`,
        "The storage refused the job's answer.");
    }
    return readAnswer(response);
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
    const route = prepared.blob.size > SYNC_LIMIT_BYTES ? "; through a job: too large to send directly" : "";
    el.sent.textContent = `${formatBytes(prepared.blob.size)}, ${kindOf(prepared.type)}` +
      `${dims(prepared.sent)} (${how}${route})`;
    el.original.textContent = `${formatBytes(file.size)}, ${kindOf(file.type)}${dims(prepared.original)}`;
    el.answered.textContent = answer
      ? `${answer.endpoint || "?"}${answer.variant ? ` (variant ${answer.variant})` : ""}` +
        `${answer.request_id ? `, request ${answer.request_id}` : ""}` +
        `${prepared.jobId && prepared.jobId !== answer.request_id ? `, job ${prepared.jobId}` : ""}`
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
    prepared.jobId = answer.jobId || null;
    showFacts(prepared, answer.body);
    const rows = parseServerTiming(answer.timing).map((stage) => timingRow(stage.name, "server", stage.ms));
    if (answer.jobId) {
      rows.push(timingRow("upload", "browser", answer.uploadMs));
      rows.push(timingRow("job", "server", answer.jobMs));
    }
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

  // ---------------------------------------------------------------- chat (llm models)

  // The data: fields of a text/event-stream as they arrive, one event a line (OpenAI's
  // streams put each event on one data: line); other fields and comments are skipped.
  async function* eventData(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    const fields = function* (lines) {
      for (const line of lines) {
        const bare = line.endsWith("\r") ? line.slice(0, -1) : line;
        if (bare.startsWith("data:")) yield bare.slice(bare.startsWith("data: ") ? 6 : 5);
      }
    };
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        pending += decoder.decode(value, {stream: true});
        const lines = pending.split("\n");
        pending = lines.pop();
        if (pending.length > MAX_EVENT_CHARS) {
          throw new PageError("InvalidStream", "The stream sent a line longer than 1 MB.");
        }
        yield* fields(lines);
      }
      yield* fields([pending + decoder.decode()]);
    } finally {
      reader.cancel().catch(() => {}); // a stream left early (Stop, an error) is closed
    }
  }

  // A chunk's text: a chat chunk's delta, or a text completion's text.
  function pieceOf(chunk) {
    const choice = (chunk.choices || [])[0];
    if (!choice) return {text: "", finish: null};
    const text = choice.delta ? choice.delta.content : choice.text;
    return {text: typeof text === "string" ? text : "", finish: choice.finish_reason || null};
  }

  // The request for the model: chat with the whole conversation, or, for a model that only
  // completes text (an lmi or tgi container), the last message as the prompt.
  function completionRequest(model) {
    const streamed = {model: model.name, stream: true, stream_options: {include_usage: true}};
    const paths = model.llm.openai_paths || [CHAT_PATH];
    if (paths.some((path) => path.endsWith(CHAT_PATH))) {
      return {path: CHAT_PATH, body: {...streamed, messages: state.chat}};
    }
    return {path: "v1/completions", body: {...streamed, prompt: state.chat.at(-1).content}};
  }

  // Stream one answer into `answer` (what was read so far: text, usage, times).
  async function streamAnswer(model, answer, signal) {
    const {path, body} = completionRequest(model);
    const response = await call(path, {
      method: "POST", body: JSON.stringify(body), signal,
      headers: headers({"Content-Type": "application/json", Accept: "text/event-stream"}),
    });
    if (!response.ok || !(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      await readAnswer(response); // a refusal throws; a 200 that is not a stream is not ours
      throw new PageError("InvalidAnswer", "The API did not answer with a stream.");
    }
    for await (const data of eventData(response)) {
      if (data.trim() === "[DONE]") return;
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch {
        throw new PageError("InvalidStream", `The stream sent a line that is not JSON: ${data.slice(0, 80)}`);
      }
      if (chunk.error) {
        throw new PageError(chunk.error.code || chunk.error.type || "StreamError",
                            chunk.error.message || "The stream failed.");
      }
      const piece = pieceOf(chunk);
      if (piece.text) answer.add(piece.text);
      if (piece.finish) answer.finish = piece.finish;
      if (chunk.usage) answer.usage = chunk.usage;
    }
    throw new PageError("StreamCut", "The stream ended without its [DONE].");
  }

  function addTurn(role, who, text) {
    const turn = document.createElement("div");
    turn.className = `turn ${role}`;
    const name = document.createElement("p");
    name.className = "who";
    name.textContent = who;
    const body = document.createElement("p");
    body.className = "text";
    const words = document.createTextNode(text);
    body.append(words);
    turn.append(name, body);
    el.chatLog.append(turn);
    return {turn, words};
  }

  function setChatStatus(text) {
    el.chatStatus.textContent = text;
  }

  function showChatError(error) {
    el.chatErrorCode.textContent = `${error.code || error.name || "Error"}:`;
    el.chatErrorMessage.textContent = error.message || String(error);
    el.chatError.hidden = false;
  }

  function chatBusy(busy) {
    el.chatSend.disabled = busy;
    el.chatStop.disabled = !busy;
    el.chatLog.setAttribute("aria-busy", busy ? "true" : "false");
  }

  function showChatFacts(answer) {
    const ms = (value) => (value === null ? "–" : `${value.toFixed(0)} ms`);
    el.chatFirst.textContent = answer.firstMs === null ? "no token" : ms(answer.firstMs);
    const after = answer.endMs - (answer.firstMs ?? answer.endMs);
    const usage = answer.usage;
    const rate = usage && after > 0 && usage.completion_tokens > 1
      ? `, ${((usage.completion_tokens - 1) / (after / 1000)).toFixed(1)} tokens/s after the first` : "";
    el.chatTotal.textContent = `${ms(answer.endMs)}${rate}`;
    el.chatUsage.textContent = usage
      ? `${usage.prompt_tokens} prompt, ${usage.completion_tokens} completion`
      : `not given (${answer.pieces} pieces of text received)`;
    el.chatFinish.textContent = answer.finish || (answer.stopped ? "stopped here" : "–");
    el.chatFacts.hidden = false;
  }

  async function sendChat() {
    const model = chosenLlm();
    const text = el.chatInput.value.trim();
    if (!model || !text || state.chatController) return;
    el.chatError.hidden = true;
    el.chatFacts.hidden = true;
    el.chatInput.value = "";
    state.chat.push({role: "user", content: text});
    addTurn("user", "You", text);
    const {words} = addTurn("assistant", model.name, "");
    const controller = new AbortController();
    state.chatController = controller;
    chatBusy(true);
    setChatStatus(`${model.name} is answering…`);
    const started = performance.now();
    const answer = {text: "", pieces: 0, firstMs: null, endMs: null, usage: null, finish: null,
                    stopped: false};
    answer.add = (piece) => {
      if (answer.firstMs === null) answer.firstMs = performance.now() - started;
      answer.text += piece;
      answer.pieces += 1;
      words.appendData(piece);
    };
    try {
      await streamAnswer(model, answer, controller.signal);
      setChatStatus("Answered.");
    } catch (error) {
      answer.stopped = error.name === "AbortError";
      if (answer.stopped) setChatStatus("Stopped.");
      else {
        setChatStatus("The answer failed.");
        showChatError(error);
      }
    } finally {
      answer.endMs = performance.now() - started;
      state.chatController = null;
      chatBusy(false);
    }
    // what the model said stays in the conversation; a question left unanswered does not
    if (answer.text) state.chat.push({role: "assistant", content: answer.text});
    else state.chat.pop();
    showChatFacts(answer);
  }

  function stopChat() {
    if (state.chatController) state.chatController.abort();
  }

  function clearChat() {
    stopChat();
    state.chat = [];
    el.chatLog.replaceChildren();
    el.chatError.hidden = true;
    el.chatFacts.hidden = true;
    setChatStatus("Ask the model something.");
  }

  function wireChat() {
    el.chatForm.addEventListener("submit", (event) => {
      event.preventDefault();
      sendChat();
    });
    el.chatInput.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        el.chatForm.requestSubmit();
      }
    });
    el.chatStop.addEventListener("click", stopChat);
    el.chatClear.addEventListener("click", clearChat);
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
      stopChat(); // an answer being streamed is another model's
      showMode();
      if (!kTouched) setDefaultK();
      run();
    });
    wireChat();

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
