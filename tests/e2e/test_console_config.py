"""The console's Configuration page in Chromium against a real ``broker serve --api --mqtt`` on each
database: an admin downloads the export, changes the file, uploads it, reads the dry run's report
(the database unchanged), confirms, and the database holds the change."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.processes import Brokers
from tests.e2e.test_console import browser  # noqa: F401 (the browser fixture)
from tests.e2e.test_console_pages import console  # noqa: F401 (an admin signed in, its errors)


def test_an_admin_downloads_changes_uploads_and_applies_the_configuration(
    console: tuple[Page, str, list[str]],  # noqa: F811
    brokers: Brokers,
    tmp_path: Path,
) -> None:
    page, base, errors = console
    qm = brokers.qm
    qm.define_queue("APP.IN", max_depth=100)
    page.goto(f"{base}/console/config")
    expect(page.locator("nav a.current")).to_have_text("Configuration")
    with page.expect_download() as downloading:
        page.click("#export button:has-text('Download')")
    download = downloading.value
    assert download.suggested_filename == "QM1-config.toml"
    text = Path(download.path()).read_text(encoding="utf-8")
    assert '[[queue]]\nname = "APP.IN"' in text and "[[mqtt_principal]]" in text

    changed = tmp_path / "changed.toml"
    changed.write_text(
        text.replace("max_depth = 100\n", "max_depth = 2000\n") + '\n[[queue]]\nname = "APP.NEW"\n',
        encoding="utf-8",
    )
    page.set_input_files("#upload input[name=file]", str(changed))
    page.click("#upload button:has-text('Dry run')")
    expect(page.locator("#report ul.changes li")).to_have_text(
        ["alter queue APP.IN: max_depth 100 -> 2000", "create queue APP.NEW"]
    )
    assert qm.inquire_queue("APP.IN").max_depth == 100 and qm.list_queues("APP.NEW") == []

    page.click("button:has-text('Apply these 2 changes')")
    expect(page.locator(".note")).to_have_text(
        "Imported 2 changes: alter queue APP.IN: max_depth 100 -> 2000; create queue APP.NEW"
    )
    assert qm.inquire_queue("APP.IN").max_depth == 2000
    assert [q.name for q in qm.list_queues("APP.NEW")] == ["APP.NEW"]

    page.set_input_files("#upload input[name=file]", str(changed))
    page.click("#upload button:has-text('Dry run')")
    expect(page.locator("#report .note")).to_have_text(
        "No changes: the broker already has what the file says."
    )
    assert errors == []
