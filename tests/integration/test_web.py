"""The web page (GET /) in a real browser, against the real stack: Chromium (the one
``sagegate browser`` finds or installs, as ``make test`` runs it first), driven by
Playwright, calling chalice local and the emulator's real image model.

The page shrinks a photo to the model's resize rule before sending it: these tests read what
it sent from the browser's own network log, check that the model's answer for it matches the
answer for the original, and go through the page as a keyboard user and on a phone.
"""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import cv2
import numpy as np
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    expect,
)
from skimage import data

from tests.integration.conftest import JobsStack, Stack, jpeg_of

pytestmark = pytest.mark.integration

CAT_LABELS = re.compile(r"^(tabby|tiger cat|Egyptian cat)$")
COFFEE_LABELS = re.compile(r"^(espresso|cup|coffee mug)$")
PHONE = {"viewport": {"width": 375, "height": 812}, "is_mobile": True, "has_touch": True,
         "device_scale_factor": 3}
# A text colour's contrast ratio against the background it is drawn on (WCAG 2), for every
# visible element with text of its own.
CONTRAST_JS = """() => {
  const channel = (c) => {
    c /= 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  const rgba = (text) => text.match(/[\\d.]+/g).map(Number);
  const luminance = ([r, g, b]) =>
    0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  const background = (node) => {
    for (; node; node = node.parentElement) {
      const [r, g, b, a = 1] = rgba(getComputedStyle(node).backgroundColor);
      if (a > 0) return [r, g, b];
    }
    return [255, 255, 255];
  };
  const low = [];
  for (const node of document.querySelectorAll("body *")) {
    const own = Array.from(node.childNodes)
      .some((child) => child.nodeType === 3 && child.textContent.trim());
    const style = getComputedStyle(node);
    if (!own || !node.getClientRects().length || style.visibility === "hidden") continue;
    const rect = node.getBoundingClientRect();
    if (rect.width <= 1 || rect.height <= 1) continue;  // visually hidden text
    const [lighter, darker] = [luminance(rgba(style.color)), luminance(background(node))]
      .sort((a, b) => b - a);
    const ratio = (lighter + 0.05) / (darker + 0.05);
    if (ratio < 4.5) low.push(`${node.tagName}#${node.id}.${node.className}: ${ratio.toFixed(2)}`);
  }
  return low;
}"""


@pytest.fixture(scope="module")
def big_photos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """12 MP JPEGs (4032x3024, quality 90) of scikit-image's photos, as a phone takes them
    (built as conftest.py's ``photos`` fixture builds its 12 MP one)."""
    folder = tmp_path_factory.mktemp("web-photos")
    paths = {}
    for name, image in (("chelsea", data.chelsea()), ("coffee", data.coffee())):
        large = cv2.resize(image, (4032, 3024), interpolation=cv2.INTER_CUBIC)
        path = folder / f"{name}-12mp.jpg"
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(large, cv2.COLOR_RGB2BGR),
                               [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        path.write_bytes(buf.tobytes())
        paths[name] = path
    return paths


@dataclass
class Watched:
    """A page, with everything it logged and every request it made."""

    page: Page
    origin: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def choose(self, path: Path) -> Request:
        """Upload ``path`` through the file input; the prediction request the page sent."""
        with self.page.expect_request(is_prediction) as sent:
            self.page.set_input_files("#file", path)
        return sent.value

    def labels(self) -> list[str]:
        return self.page.locator("#predictions .label").all_inner_texts()

    def wait_for_results(self, count: int = 5) -> None:
        expect(self.page.locator("#predictions li")).to_have_count(count)

    def assert_clean(self) -> None:
        """Nothing loaded from another origin; no CSP violation, no script error."""
        foreign = [url for url in self.urls
                   if not url.startswith((self.origin + "/", "blob:", "data:"))]
        assert foreign == []
        assert self.console_errors == []
        assert self.page_errors == []


def is_prediction(request: Request) -> bool:
    return request.method == "POST" and "predict" in request.url


def watch(page: Page, origin: str) -> Watched:
    """Record the page's console errors, script errors and requests."""
    watched = Watched(page, origin)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.console_errors.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: watched.page_errors.append(str(error)))
    page.on("request", lambda request: watched.urls.append(request.url))
    return watched


def open_page(browser: Browser, stack: Stack, **context: Any) -> Iterator[Watched]:
    browser_context = browser.new_context(**context)
    page = browser_context.new_page()
    watched = watch(page, stack.api.url)
    # A listener for the whole page keeps Playwright's file chooser interception on: it is
    # otherwise switched on by each expect_file_chooser, racing the key press that opens one.
    page.on("filechooser", lambda _chooser: None)
    response = page.goto(stack.api.url + "/")
    assert response is not None and response.ok
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator("#boot")).to_be_hidden()  # the script ran
    try:
        yield watched
    finally:
        browser_context.close()


@pytest.fixture
def web(browser: Browser, stack: Stack) -> Iterator[Watched]:
    yield from open_page(browser, stack, viewport={"width": 1280, "height": 900})


@pytest.fixture
def phone(browser: Browser, stack: Stack) -> Iterator[Watched]:
    yield from open_page(browser, stack, color_scheme="dark", **PHONE)


def size_text(size: int) -> str:
    """A byte count as the page writes it."""
    return f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def webp_chunks(webp: bytes) -> list[str]:
    """The chunk types of a WebP file (VP8L: lossless image data; "VP8 ": lossy)."""
    assert webp[:4] == b"RIFF" and webp[8:12] == b"WEBP"
    chunks, at = [], 12
    while at + 8 <= len(webp):
        size = int.from_bytes(webp[at + 4:at + 8], "little")
        chunks.append(webp[at:at + 4].decode("latin-1"))
        at += 8 + size + (size & 1)
    return chunks


def probabilities(stack: Stack, body: bytes, content_type: str) -> dict[int, float]:
    response = stack.post("/predict?k=1000", body, content_type)
    assert response.status == 200, response.data
    return {p["index"]: p["probability"] for p in json.loads(response.data)["predictions"]}


def test_a_12_mp_photo_is_shrunk_in_the_browser_and_classified(
        web: Watched, stack: Stack, big_photos: dict[str, Path]) -> None:
    original = big_photos["chelsea"].read_bytes()
    request = web.choose(big_photos["chelsea"])
    web.wait_for_results(5)
    assert CAT_LABELS.match(web.labels()[0]), web.labels()

    # what went over the wire: the model's input size, lossless, a fraction of the upload
    sent = request.post_data_buffer
    assert sent is not None  # the page sends an ArrayBuffer: its bytes are in the log
    content_type = request.headers["content-type"]
    assert content_type in ("image/webp", "image/png")
    assert request.url.endswith("/predict?k=5")
    assert 20_000 < len(sent) < min(len(original) // 4, 250_000), (len(sent), len(original))
    assert len(original) > 800_000
    image = cv2.imdecode(np.frombuffer(sent, np.uint8), cv2.IMREAD_COLOR)
    # the shorter side exactly 256, as the server would resize it: its own resize is a no-op
    assert image is not None and image.shape == (256, 341, 3)
    if content_type == "image/webp":
        assert "VP8L" in webp_chunks(sent) and "VP8 " not in webp_chunks(sent)  # lossless

    # the server's fidelity promise holds for what the page sent: same top-1, top-5 close
    want = probabilities(stack, original, "image/jpeg")
    got = probabilities(stack, sent, content_type)
    top5 = sorted(want, key=want.__getitem__, reverse=True)[:5]
    assert max(got, key=got.__getitem__) == top5[0]
    assert max(abs(got[index] - want[index]) for index in top5) <= 0.03

    # the page says what it sent against the original, and the server's stages
    expect(web.page.locator("#sent")).to_contain_text("341 × 256")
    expect(web.page.locator("#sent")).to_contain_text(size_text(len(sent)))
    expect(web.page.locator("#original")).to_contain_text("4032 × 3024")
    expect(web.page.locator("#original")).to_contain_text(size_text(len(original)))
    timing = web.page.locator("#timing")
    for stage in ("preprocess", "endpoint", "round trip"):
        expect(timing).to_contain_text(stage)
    percent = web.page.locator("#predictions .pct").first.inner_text()
    assert re.fullmatch(r"\d{1,3}\.\d%", percent), percent
    assert web.page.evaluate(CONTRAST_JS) == []
    web.assert_clean()


def test_a_file_that_is_not_an_image_shows_the_servers_error(
        web: Watched, stack: Stack, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list: coffee, cat food\n")
    answer = stack.post("/predict?k=5", notes.read_bytes(), "text/plain")
    expected = json.loads(answer.data)
    assert answer.status == 415 and expected["Code"] == "UnsupportedMediaType"

    request = web.choose(notes)
    assert request.headers["content-type"] == "text/plain"
    error = web.page.locator("#error")
    expect(error).to_be_visible()
    expect(web.page.locator("#error-code")).to_have_text("UnsupportedMediaType:")
    expect(web.page.locator("#error-message")).to_have_text(expected["Message"])
    expect(web.page.locator("#predictions li")).to_have_count(0)
    # the error is in the live region, announced as results are
    assert web.page.locator("[aria-live=polite] #error").count() == 1
    assert web.page.evaluate(CONTRAST_JS) == []
    # a failed request is the API's answer, not a script error; the one console line
    # Chromium writes for any 4xx fetch is the only one
    assert all("415" in line for line in web.console_errors), web.console_errors
    web.console_errors.clear()
    web.assert_clean()


def focus_by_tab(page: Page, element_id: str, limit: int = 15) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} not reached with {limit} Tab presses")


def test_the_page_works_with_the_keyboard_alone(
        web: Watched, big_photos: dict[str, Path]) -> None:
    page = web.page
    focus_by_tab(page, "pick")
    # the focus is visible
    outline = page.evaluate("(() => { const s = getComputedStyle(document.activeElement);"
                            " return [s.outlineStyle, parseFloat(s.outlineWidth)]; })()")
    assert outline[0] != "none" and outline[1] >= 2
    with page.expect_file_chooser() as chooser:
        page.keyboard.press("Enter")
    with page.expect_request(is_prediction):
        chooser.value.set_files(big_photos["coffee"])
    web.wait_for_results(5)
    assert COFFEE_LABELS.match(web.labels()[0]), web.labels()

    focus_by_tab(page, "k")
    with page.expect_request(is_prediction) as sent:
        page.keyboard.press("ArrowDown")
    assert sent.value.url.endswith("?k=6")
    live = page.locator("[aria-live=polite]")
    expect(live.locator("li")).to_have_count(6)
    expect(live.locator("#status")).to_contain_text("Top 6")
    # Space opens the picker too (the drop zone is a button)
    page.focus("#pick")
    with page.expect_file_chooser():
        page.keyboard.press("Space")
    web.assert_clean()


def test_every_control_has_a_label(web: Watched) -> None:
    unlabelled = web.page.evaluate("""() => Array.from(
        document.querySelectorAll("input, select, button, textarea, summary")).filter((el) =>
        !((el.labels && el.labels.length) || el.getAttribute("aria-label") ||
          el.textContent.trim())).map((el) => el.id || el.tagName)""")
    assert unlabelled == []
    camera = web.page.locator("#camera-file")
    assert camera.get_attribute("capture") == "environment"
    assert camera.get_attribute("accept") == "image/*"


def test_on_a_phone_the_page_fits_and_shows_the_result(
        phone: Watched, big_photos: dict[str, Path]) -> None:
    page = phone.page
    expect(page.locator("#camera")).to_be_visible()  # a touch screen: the camera button
    phone.choose(big_photos["coffee"])
    phone.wait_for_results(5)
    assert COFFEE_LABELS.match(phone.labels()[0]), phone.labels()
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 375
    results = page.locator("#predictions")
    results.scroll_into_view_if_needed()
    expect(results).to_be_visible()
    expect(results).to_be_in_viewport()
    box = results.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
    assert page.evaluate(CONTRAST_JS) == []  # in the dark colour scheme
    phone.assert_clean()


def test_the_page_loads_nothing_from_elsewhere_and_breaks_no_policy(
        browser: Browser, stack: Stack, big_photos: dict[str, Path]) -> None:
    context = browser.new_context()
    # counted from the first byte of the document (an init script is not subject to the CSP)
    context.add_init_script("window.__violations = [];"
                            "document.addEventListener('securitypolicyviolation', (event) =>"
                            " window.__violations.push(event.violatedDirective + ' '"
                            " + event.blockedURI));")
    try:
        page = context.new_page()
        watched = watch(page, stack.api.url)
        page.goto(stack.api.url + "/")
        watched.choose(big_photos["chelsea"])
        watched.wait_for_results(5)
        expect(page.locator("#preview")).to_be_visible()
        assert page.evaluate("window.__violations") == []
        watched.assert_clean()
        assert {url.split("?")[0].removeprefix(stack.api.url) for url in watched.urls
                if not url.startswith("blob:")} == {
            "/", "/static/app.css", "/static/app.js", "/static/icon.svg", "/models",
            "/models/efficientnet-lite0", "/predict"}
        # the listener does see a violation: an image from elsewhere is refused
        page.evaluate("document.body.append(Object.assign(new Image(),"
                      " {src: 'https://example.invalid/x.png'}))")
        page.wait_for_function("window.__violations.length > 0")
    finally:
        context.close()


DATA_TRANSFER_JS = """([b64, name, type]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, {type}));
  return transfer;
}"""


def test_a_dropped_or_pasted_image_is_sent_as_it_is_when_that_is_smaller(
        web: Watched, stack: Stack) -> None:
    page = web.page
    # dropped: a 451x300 JPEG, smaller than any lossless copy at 385x256 -> sent untouched
    small = jpeg_of(data.chelsea(), 95)
    transfer = page.evaluate_handle(
        DATA_TRANSFER_JS, [base64.b64encode(small).decode(), "chelsea.jpg", "image/jpeg"])
    with page.expect_request(is_prediction) as dropped:
        page.dispatch_event("#pick", "drop", {"dataTransfer": transfer})
    assert dropped.value.post_data_buffer == small
    assert dropped.value.headers["content-type"] == "image/jpeg"
    web.wait_for_results(5)
    assert CAT_LABELS.match(web.labels()[0]), web.labels()
    expect(page.locator("#sent")).to_contain_text("the original")

    # pasted: a 600x400 PNG -> shrunk to 384x256 and sent losslessly
    ok, png = cv2.imencode(".png", cv2.cvtColor(data.coffee(), cv2.COLOR_RGB2BGR))
    assert ok
    transfer = page.evaluate_handle(
        DATA_TRANSFER_JS, [base64.b64encode(png.tobytes()).decode(), "coffee.png", "image/png"])
    with page.expect_request(is_prediction) as pasted:
        page.evaluate("(transfer) => document.dispatchEvent(new ClipboardEvent('paste',"
                      " {clipboardData: transfer, bubbles: true, cancelable: true}))", transfer)
    body = pasted.value.post_data_buffer
    assert body is not None and len(body) < len(png)
    image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None and image.shape == (256, 384, 3)
    web.wait_for_results(5)
    assert COFFEE_LABELS.match(web.labels()[0]), web.labels()
    web.assert_clean()


# ---------------------------------------------------------------- through a job

# A browser that cannot open the image (a phone out of memory for a large photo does this):
# the page sends the file as it is, and one too large for the synchronous route goes through
# a job, where the server decodes it.
NO_DECODE_JS = """
window.createImageBitmap = () => Promise.reject(new DOMException("out of memory",
                                                                 "InvalidStateError"));
HTMLImageElement.prototype.decode = function () {
  return Promise.reject(new DOMException("out of memory", "EncodingError"));
};
"""
VIOLATIONS_JS = ("window.__violations = [];"
                 "document.addEventListener('securitypolicyviolation', (event) =>"
                 " window.__violations.push(event.violatedDirective + ' ' + event.blockedURI));")


@pytest.fixture(scope="module")
def big_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12 MP PNG of scikit-image's cat (about 9 MB), over the synchronous route's 4.7 MB."""
    large = cv2.resize(data.chelsea(), (4032, 3024), interpolation=cv2.INTER_CUBIC)
    ok, png = cv2.imencode(".png", cv2.cvtColor(large, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_PNG_COMPRESSION, 1])
    assert ok
    path = tmp_path_factory.mktemp("web-png") / "chelsea-12mp.png"
    path.write_bytes(png.tobytes())
    assert path.stat().st_size > 4_706_304
    return path


def stored_upload(s3_url: str, bucket: str, upload_id: str) -> bytes:
    """An upload as the local S3 (moto's server) keeps it, read with boto3."""
    s3 = boto3.client("s3", endpoint_url=s3_url, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    key = f"jobs/uploads/{upload_id}"
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_a_big_png_the_browser_cannot_open_goes_through_a_job(
        browser: Browser, jobs_stack: JobsStack, big_png: Path) -> None:
    jobs_url = jobs_stack.api.url
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(NO_DECODE_JS)
    context.add_init_script(VIOLATIONS_JS)
    try:
        page = context.new_page()
        watched = watch(page, jobs_url)
        response = page.goto(jobs_url + "/")
        assert response is not None and response.ok
        policy = response.headers["content-security-policy"]
        storage = re.search(r"connect-src 'self' (\S+);", policy)
        assert storage is not None, policy  # the page may post to the local S3, and only it
        expect(page.locator("#boot")).to_be_hidden()
        with page.expect_response(lambda answer: answer.url.endswith("/uploads")) as presigned, \
                page.expect_request(lambda request: request.url.startswith(storage[1])) as posted:
            page.set_input_files("#file", big_png)
        assert posted.value.method == "POST"
        upload_id = presigned.value.json()["upload_id"]
        watched.wait_for_results(5)
        assert CAT_LABELS.match(watched.labels()[0]), watched.labels()

        # the file went to S3 as it is, then a job: never the synchronous route
        paths = [url.removeprefix(jobs_url) for url in watched.urls]
        assert "/uploads" in paths and not any("predict" in path for path in paths)
        assert any(re.fullmatch(r"/models/efficientnet-lite0/jobs\?k=5", p) for p in paths)
        assert any(re.fullmatch(r"/jobs/[0-9a-f]{32}", p) for p in paths)
        stored = stored_upload(storage[1], jobs_stack.jobs.bucket, upload_id)
        assert stored == big_png.read_bytes()  # the file as it is
        progress = page.locator("#upload-progress")
        assert progress.get_attribute("value") == progress.get_attribute("max") == str(
            big_png.stat().st_size)
        expect(page.locator("#upload-text")).to_contain_text(
            f"{size_text(big_png.stat().st_size)} of")
        expect(page.locator("#job-text")).to_contain_text("succeeded")
        expect(page.locator("#sent")).to_contain_text("through a job")
        expect(page.locator("#timing")).to_contain_text("upload")

        # k again: a new job on the same upload, not a second upload
        with page.expect_request(lambda request: "/jobs?k=3" in request.url):
            page.select_option("#k", "3")
        expect(page.locator("#predictions li")).to_have_count(3)
        assert sum(url.startswith(storage[1]) for url in watched.urls) == 1

        assert page.evaluate("window.__violations") == []
        assert page.evaluate(CONTRAST_JS) == []
        assert watched.console_errors == [] and watched.page_errors == []
    finally:
        context.close()
