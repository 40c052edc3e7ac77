"""A generated messy document tree and a tiny PDF writer, for the ingest tests.

Not collected by pytest (the name does not start with ``test_``).
"""

from __future__ import annotations

import gzip
from pathlib import Path

__all__ = ["make_pdf", "messy_tree"]


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF with one page per string (Helvetica, one line each), built by hand."""
    objects: list[bytes] = []
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode()
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {5 + 2 * i} 0 R "
                       f"/Resources << /Font << /F1 3 0 R >> >> >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def messy_tree(root: Path) -> Path:
    """Write a tree with every kind of file the ingest meets; returns ``root``.

    Read: guide/install.md (3 sections), notes/latin1.txt (Latin-1), page.html, deep/a/b/c.rst,
    manual.pdf (2 pages), src/app.py, src/lib.go, changelog.gz (gzip text), README.
    Skipped: blob.bin (binary), empty.txt (empty), data.xyz (unknown type), .hidden/x.md (hidden).
    """
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "install.md").write_text(
        "# Install\n\nGet the package.\n\n## Linux\n\nUse apt to install it.\n\n## macOS\n\nUse brew.\n")
    (root / "notes").mkdir()
    (root / "notes" / "latin1.txt").write_bytes("Café crème à la française, naïve résumé.\n".encode("latin-1"))
    (root / "page.html").write_text(
        "<!doctype html><html><head><title>The  Page</title><style>p{color:red}</style>"
        "<script>var hidden = 'scripted';</script></head><body><nav>Home | About</nav>"
        "<main><h1>Welcome</h1><p>Hybrid <b>retrieval</b> combines ranks.</p><p>Second paragraph.</p></main>"
        "</body></html>")
    (root / "deep" / "a" / "b").mkdir(parents=True)
    (root / "deep" / "a" / "b" / "c.rst").write_text("Title\n=====\n\nDeeply nested text.\n")
    (root / "manual.pdf").write_bytes(make_pdf(["First page about vectors.", "Second page about graphs."]))
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text(
        "import os\n\n\ndef first():\n    return 1\n\n\nclass Second:\n    def method(self):\n        return 2\n")
    (root / "src" / "lib.go").write_text("package lib\n\nfunc Add(a, b int) int {\n\treturn a + b\n}\n")
    (root / "changelog.gz").write_bytes(gzip.compress(b"Version 2: fixed the widget.\n"))
    (root / "README").write_text("Read me first.\n")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (root / "empty.txt").write_bytes(b"")
    (root / "data.xyz").write_text("unknown format\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.md").write_text("# hidden\n")
    return root
