"""Documents for a knowledge base: plain text, Markdown, HTML and PDF, as text with a source.

HTML is read with the standard library's parser (scripts, styles and other non-text left
out, block elements on lines of their own); PDF with ``pypdf`` (``pip install
"tether[knowledge]"``), each page's text in order, with where each page begins.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from tether._internal.frozen import frozen
from tether._internal.mend import mended
from tether.errors import InvalidEntry, MissingExtraError

__all__ = ["Document", "html_text", "read_document"]

_MAX_BYTES = 50_000_000


@frozen
class Document:
    """A text and where it came from."""

    source: str
    """Its name in citations: a path, a URL, a title."""
    text: str
    """Its text."""
    title: str | None = None
    """Its title, when it has one (an HTML ``<title>``, a Markdown first heading)."""
    pages: tuple[int, ...] = ()
    """Where each page begins in ``text`` (a PDF's); empty: no pages."""

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            raise InvalidEntry("a document needs a source (a path, a URL or a title)")
        if not isinstance(self.text, str):  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            raise InvalidEntry(f"the text of {self.source!r} must be a string")
        for name in ("source", "text"):  # a lone surrogate (a file name that is not UTF-8)
            object.__setattr__(self, name, mended(getattr(self, name)))


_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object"})
"""Elements whose content is not text to read (a ``<head>`` holds only the title and these)."""
_BLOCK = frozenset(
    {
        "p", "div", "section", "article", "header", "footer", "main", "aside", "nav", "li",
        "ul", "ol", "table", "tr", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
        "blockquote", "dt", "dd", "figcaption", "title",
    }
)  # fmt: skip


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self._skip:  # not an ``<svg>``'s own title
            self._in_title = True
        elif tag in _SKIP:
            self._skip += 1
        if tag in _BLOCK:
            self.parts.append("\n\n")
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and not self._skip:
            self.parts.append("#" * int(tag[1]) + " ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIP and self._skip:
            self._skip -= 1
        if tag in _BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            self.parts.append(data)

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        # "<![foo]>": the stdlib knows only CDATA, IF, ELSE... and raises AssertionError on the
        # rest (one odd page stopped an ingestion); HTML5 reads it as a comment up to ">"
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i)
            return -1 if end < 0 else end + 1

    def close(self) -> None:
        # What feed() leaves unparsed and begins with "<" is a tag, comment or declaration with no
        # end before the end of the page: HTML5 drops the tag and the others hold no text, so it is
        # dropped whole. HTMLParser.close() before Python 3.11.13 (CPython gh-135462) passes its
        # first characters on as text and parses the rest again, once for each "<" in it: quadratic,
        # "<a " * 40_000 took 94 s. A lone "<" or "</" at the end stays text, as it does there.
        if self.rawdata.startswith("<") and self.rawdata not in ("<", "</"):
            self.rawdata = ""
        super().close()


def html_text(html: str) -> tuple[str, str | None]:
    """An HTML page's text (headings as Markdown ``#`` lines) and its title."""
    parser = _Text()
    parser.feed(html)  # in one piece: each feed() parses again what the last one left unfinished
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    title = " ".join("".join(parser.title).split()) or None
    return text, title


def _pdf(path: Path) -> Document:
    try:
        from pypdf import PdfReader
    except ImportError:
        raise MissingExtraError("knowledge", "pypdf") from None
    try:
        reader = PdfReader(path)
        texts = [(page.extract_text() or "").strip() for page in reader.pages]
        info = reader.metadata
        title = str(info.title) if info is not None and info.title else None
    except Exception as exc:  # pypdf raises many kinds on a malformed file, not one tree
        raise InvalidEntry(
            f"{path} is not a PDF pypdf can read ({type(exc).__name__}: {exc}); check the file"
        ) from None
    pages: list[int] = []
    text = ""
    for page in texts:
        if text:
            text += "\n\n"
        pages.append(len(text))
        text += page
    return Document(source=str(path), text=text, title=title, pages=tuple(pages))


def read_document(path: str | Path, *, source: str | None = None) -> Document:
    """The document at ``path`` by its suffix: ``.pdf``, ``.html``/``.htm``, Markdown or text.

    ``source``: the name citations give it (default: the path).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise InvalidEntry(f"cannot read {path}: {exc.strerror or exc}") from None
    if size > _MAX_BYTES:
        raise InvalidEntry(f"{path} has {size} bytes; documents over 50 MB are not read: split it")
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        document = _pdf(path)
    else:
        try:
            raw = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InvalidEntry(f"cannot read {path}: {exc.strerror or exc}") from None
        if suffix in (".html", ".htm", ".xhtml"):
            text, title = html_text(raw)
        else:
            text = raw
            heading = re.search(r"^#[ \t]+(.+)$", raw, re.MULTILINE)
            title = heading.group(1).strip() if heading and suffix in (".md", ".markdown") else None
        document = Document(source=str(path), text=text, title=title)
    if source is not None:
        document = Document(
            source=source, text=document.text, title=document.title, pages=document.pages
        )
    return document
