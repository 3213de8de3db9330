"""The browser the UI tests drive (Debian's chromium through Playwright, headless, offline) and where they leave
their screenshots."""

from __future__ import annotations

from pathlib import Path

from pipelines.engine.config import REPO_ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO_ROOT / ".runtime" / "artifacts"
