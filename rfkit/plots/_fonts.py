"""TrueType subsets for PDF figures, made once per font and process instead of once per figure.

Matplotlib embeds a TrueType (Type 42) font in a PDF as a subset holding the glyphs the figure
uses, made with fontTools for every file: about a third of a second per font and figure, most
of the time of writing a study's PDFs. :func:`cached_subsets` makes one subset per font holding
a fixed set of characters (printable ASCII, Latin-1, Greek and the mathematical signs rfkit's
labels use) and reuses its bytes for every later figure; a figure that draws a glyph beyond
that set gets a subset of the set plus its own extra glyphs (made once per such set). A
figure's PDF then embeds somewhat more glyphs than it draws (tens of kilobytes), it does not
depend on the figures drawn before it in the process, and the text, widths and character maps
are exactly those matplotlib writes otherwise.

The subsets are also kept on disk, in matplotlib's cache folder (``rfkit-font-subsets/`` under
:func:`matplotlib.get_cachedir`), keyed by the font file (path, size, modification time), the
glyphs and the versions of matplotlib and fontTools, with the SHA-256 of the subset beside it: a
later process reuses them, and an entry that does not match its checksum is made again.

Only :mod:`matplotlib.backends._backend_pdf_ps`'s ``get_glyphs_subset`` and ``font_as_file`` are
replaced, for the duration of a ``with`` block; where a matplotlib release lacks them, nothing
is replaced and matplotlib subsets as usual.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["cached_subsets"]

#: characters every cached subset holds: printable ASCII, Latin-1, Greek, and mathematical signs
_BASE_CHARS = (
    "".join(chr(c) for c in range(0x20, 0x7F))
    + "".join(chr(c) for c in range(0xA0, 0x100))
    + "".join(chr(c) for c in range(0x391, 0x3CA))
    + "−±×÷≤≥≈≠∞√∑∏∫∂∇‖⋅·…–—‘’“”•→←↑↓∈∉⊂⊆∝°′″ℓ"
)

_LOCK = threading.Lock()
#: per (font file, glyph indices held): (those glyphs, the subset's bytes, original -> subset glyph index)
_CACHE: dict[Any, tuple[frozenset[int], bytes, dict[int, int]]] = {}
#: per font file: glyph indices of the fixed characters
_BASE: dict[Any, frozenset[int]] = {}


class _Cached:
    """What ``get_glyphs_subset`` yields: ``font`` (the bytes, for ``font_as_file``) and the index map."""

    def __init__(self, data: bytes, glyph_index_map: dict[int, int]) -> None:
        self.font = self  # font_as_file(subset.font) receives this object
        self.data = data
        self.glyph_index_map = glyph_index_map


def _base_glyphs(fontfile: Any) -> set[int]:
    """Glyph indices of :data:`_BASE_CHARS` in ``fontfile`` (characters the font lacks are skipped)."""
    from matplotlib.ft2font import FT2Font

    font = FT2Font(fontfile)
    cmap = font.get_charmap()
    return {int(cmap[ord(ch)]) for ch in _BASE_CHARS if ord(ch) in cmap}


_ACTIVE = [0]  # blocks open (threads may save figures at the same time): patched while > 0


@contextlib.contextmanager
def cached_subsets() -> Iterator[None]:
    """Within the block, PDF font subsets come from (and go to) the per-process cache."""
    try:
        from matplotlib.backends import _backend_pdf_ps as pdfps
    except ImportError:  # pragma: no cover - a matplotlib without the module: nothing to replace
        yield
        return
    if not (hasattr(pdfps, "get_glyphs_subset") and hasattr(pdfps, "font_as_file")):
        yield  # pragma: no cover - another matplotlib: it subsets as usual
        return
    with _LOCK:
        if _ACTIVE[0] == 0:
            _ORIGINAL["subset"], _ORIGINAL["file"] = pdfps.get_glyphs_subset, pdfps.font_as_file
            pdfps.get_glyphs_subset, pdfps.font_as_file = _get_glyphs_subset, _font_as_file
        _ACTIVE[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
            if _ACTIVE[0] == 0:
                pdfps.get_glyphs_subset, pdfps.font_as_file = _ORIGINAL["subset"], _ORIGINAL["file"]


_ORIGINAL: dict[str, Any] = {}


def _disk_key(fontfile: Any, glyphs: frozenset[int]) -> str | None:
    """The name of a subset on disk: a hash of the font file's identity, the glyphs and the versions."""
    import matplotlib

    try:
        st = os.stat(str(fontfile))
        import fontTools
    except (OSError, ImportError):
        return None
    ident = [
        str(fontfile),
        getattr(fontfile, "face_index", 0),
        st.st_size,
        st.st_mtime_ns,
        sorted(glyphs),
        matplotlib.__version__,
        getattr(fontTools, "version", "?"),
    ]
    return hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:32]


def _disk_folder() -> Path | None:
    try:
        import matplotlib

        return Path(matplotlib.get_cachedir()) / "rfkit-font-subsets"
    except Exception:  # noqa: BLE001 - no cache folder: subsets are made in memory only
        return None


def _read_disk(key: str) -> tuple[bytes, dict[int, int]] | None:
    """A subset from disk, or None where there is none or it does not match its checksum."""
    folder = _disk_folder()
    if folder is None:
        return None
    try:
        meta = json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
        data = (folder / f"{key}.ttf").read_bytes()
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            return None
        return data, {int(k): int(v) for k, v in meta["glyph_index_map"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_disk(key: str, data: bytes, index_map: dict[int, int]) -> None:
    """Keep a subset on disk (atomically; the checksum file last). A folder that cannot be written is skipped."""
    folder = _disk_folder()
    if folder is None:
        return
    meta = {"sha256": hashlib.sha256(data).hexdigest(), "glyph_index_map": index_map}
    tag = f".{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, payload in ((f"{key}.ttf", data), (f"{key}.json", json.dumps(meta).encode())):
            tmp = folder / (name + tag)
            tmp.write_bytes(payload)
            os.replace(tmp, folder / name)
    except OSError:
        return


@contextlib.contextmanager
def _get_glyphs_subset(fontfile: Any, glyphs: Any) -> Iterator[Any]:
    wanted = {int(g) for g in glyphs}
    font = (str(fontfile), getattr(fontfile, "face_index", 0))
    with _LOCK:
        base = _BASE.get(font)
        if base is None:
            base = _BASE[font] = frozenset(_base_glyphs(fontfile))
        # the fixed set plus this figure's own extra glyphs, never those of earlier figures: a
        # figure's PDF does not depend on what the process drew before it
        union = base | frozenset(wanted)
        key = (font, union)
        held = _CACHE.get(key)
        if held is None:
            name = _disk_key(fontfile, union)
            found = _read_disk(name) if name is not None else None
            if found is None:
                with _ORIGINAL["subset"](fontfile, set(union)) as subset:
                    data = _ORIGINAL["file"](subset.font).getvalue()
                    index_map = {int(k): int(v) for k, v in subset.glyph_index_map.items()}
                if name is not None:
                    _write_disk(name, data, index_map)
                found = (data, index_map)
            held = _CACHE[key] = (union, found[0], found[1])
    yield _Cached(held[1], held[2])


def _font_as_file(font: Any) -> io.BytesIO:
    if isinstance(font, _Cached):
        return io.BytesIO(font.data)
    return _ORIGINAL["file"](font)  # type: ignore[no-any-return]
