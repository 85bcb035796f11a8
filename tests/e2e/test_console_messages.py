"""Messages in the web console, in Chromium against a real ``broker serve --api --mqtt`` on each
database: an operator puts a test message with MQMD fields, gets one after a confirmation page,
copies and moves a selection (and a target that is not defined refuses, losing nothing), deletes
one after a confirmation page, publishes a retained publication with a folder of its own that a
subscriber queue receives, forwards a dead letter to another queue without its MQDLH and
discards one after a confirmation page. Each step is checked on the page and in the database,
and no page has a script or console error."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from admin_api.commands import BrokerCommands
from broker import store
from broker.client import BrokerClient
from queues import DEAD_LETTER_QUEUE, Message, QueueManager
from queues.message import MQFMT_STRING
from queues.reasons import Reason
from tests.e2e.harness import drain
from tests.e2e.processes import Brokers, wait_until
from tests.e2e.test_console import TIMEOUT_MS, browser  # noqa: F401 (the browser fixture)
from tests.e2e.test_console_pages import console  # noqa: F401 (the signed-in page fixture)

Console = tuple[Page, str, list[str]]


def bodies(qm: QueueManager, queue: str) -> list[bytes]:
    return [b.message.body for b in qm.browse(queue, limit=100)]


def ids(qm: QueueManager, queue: str) -> list[str]:
    return [b.message.msg_id.hex() for b in qm.browse(queue, limit=100)]


def test_an_operator_puts_gets_copies_moves_and_deletes_messages(
    console: Console,  # noqa: F811
    brokers: Brokers,
) -> None:
    page, base, errors = console
    page.set_default_timeout(TIMEOUT_MS)
    qm = brokers.qm
    for name in ("ORDERS", "ORDERS.COPY", "REPAIR"):
        qm.define_queue(name)
    page.goto(f"{base}/console/queues/ORDERS")

    # Put a test message, as MQ Explorer does: the body and MQMD fields.
    page.click("details.put summary")
    form = page.locator("form.put")
    form.locator("textarea[name=body]").fill("order 1")
    form.locator("input[name=priority]").fill("7")
    form.locator("select[name=persistence]").select_option("1")
    form.locator("input[name=correl_id]").fill("0a0b")
    form.locator("input[name=reply_to_q]").fill("REPLIES")
    form.locator("button[type=submit]").click()
    expect(page.locator(".note")).to_have_text(re.compile(r"^Put message [0-9a-f]{48} on ORDERS$"))
    expect(page.locator("article.message pre.body")).to_have_text("order 1")
    (put,) = (b.message for b in qm.browse("ORDERS"))
    assert (put.body, put.format, put.priority, put.persistence, put.reply_to_q, put.user_id) == (
        b"order 1",
        MQFMT_STRING,
        7,
        1,
        "REPLIES",
        "ada",
    )
    assert put.correl_id == bytes.fromhex("0a0b").ljust(24, b"\x00")
    for text in ("order 2", "order 3"):
        qm.put("ORDERS", Message(body=text.encode(), format=MQFMT_STRING))
    first, second, third = ids(qm, "ORDERS")

    # Get the first one, after its confirmation page: the page shows what left the queue.
    page.goto(f"{base}/console/queues/ORDERS")
    page.locator(f"article[data-msg-id='{first}']").get_by_role("link", name="Get", exact=True).click()
    expect(page.locator("h1")).to_have_text("Get a message from ORDERS?")
    assert ids(qm, "ORDERS") == [first, second, third]
    page.click("button:has-text('Yes, get it')")
    expect(page.locator("h1")).to_have_text("Message got from ORDERS")
    expect(page.locator("article.message pre.body")).to_have_text("order 1")
    assert ids(qm, "ORDERS") == [second, third]

    # Copy the third (its MsgId kept), move the second, and a target that is not there refuses.
    page.goto(f"{base}/console/queues/ORDERS")
    page.check(f"input[name=msg_id][value='{third}']")
    page.fill("#messages input[name=target]", "ORDERS.COPY")
    page.click("button:has-text('Copy selected')")
    expect(page.locator(".note")).to_have_text("Copied 1 messages from ORDERS to ORDERS.COPY")
    assert (ids(qm, "ORDERS"), ids(qm, "ORDERS.COPY")) == ([second, third], [third])
    page.check(f"input[name=msg_id][value='{second}']")
    page.fill("#messages input[name=target]", "NOT.THERE")
    page.click("button:has-text('Move selected')")
    expect(page.locator(".note.refused")).to_contain_text("MQRC_UNKNOWN_OBJECT_NAME (2085)")
    assert ids(qm, "ORDERS") == [second, third]
    page.check(f"input[name=msg_id][value='{second}']")
    page.fill("#messages input[name=target]", "REPAIR")
    page.click("button:has-text('Move selected')")
    expect(page.locator(".note")).to_have_text("Moved 1 messages from ORDERS to REPAIR")
    expect(page.locator("article.message")).to_have_count(1)
    assert (ids(qm, "ORDERS"), bodies(qm, "REPAIR")) == ([third], [b"order 2"])

    # Delete a selection, after its confirmation page.
    page.check("#messages input.select-all")
    page.click("button:has-text('Delete selected')")
    expect(page.locator("h1")).to_have_text("Delete 1 messages from ORDERS?")
    assert ids(qm, "ORDERS") == [third]
    page.click("button:has-text('Yes, delete 1 messages')")
    expect(page.locator(".note")).to_have_text("Deleted 1 of 1 messages")
    expect(page.locator("main")).to_contain_text("No messages.")
    assert ids(qm, "ORDERS") == []
    assert errors == []


def test_an_operator_publishes_and_forwards_and_discards_dead_letters(
    console: Console,  # noqa: F811
    brokers: Brokers,
) -> None:
    page, base, errors = console
    page.set_default_timeout(TIMEOUT_MS)
    qm = brokers.qm
    qm.define_queue("SCORES")
    qm.define_queue("REPAIR")
    wait_until(lambda: BrokerCommands(qm).router_alive(), 30, "the router's heartbeat")
    with BrokerClient(qm, timeout=30) as client:
        assert client.subscribe("Sport/#", "SCORES").ok

    # Publish: a Publish command on the stream queue, routed as an application's.
    page.click("nav >> text=Publish")
    page.fill("input[name=topic]", "Sport/Soccer")
    page.fill("textarea[name=body]", "1-0")
    page.fill("textarea[name=folder]", "<usr><Match>Team1 v Team2</Match></usr>")
    page.check("input[name=retain]")
    page.click("button:has-text('Publish')")
    expect(page.locator(".note")).to_have_text("Published on Sport/Soccer (retained)")
    page.goto(f"{base}/console/queues/SCORES")
    expect(page.locator("article.message .topics")).to_have_text("Sport/Soccer")
    expect(page.locator("article.message pre.body")).to_have_text("1-0")
    (delivered,) = drain(qm, "SCORES")
    assert (delivered.topic, delivered.text, delivered.folders) == (
        "Sport/Soccer",
        "1-0",
        ("<usr><Match>Team1 v Team2</Match></usr>",),
    )
    with qm.reading() as conn:
        ((_, retained),) = store.list_retained(conn, "Sport/#", None, after_id=0, limit=10)
    assert (retained.topic, retained.rfh2.payload, retained.message.user_id) == (
        "Sport/Soccer",
        b"1-0",
        "ada",
    )

    # A dead letter: shown with its MQDLH, forwarded to REPAIR as the message it carries.
    with qm.unit_of_work() as uow:
        lost = uow.dead_letter("ORDERS", Message(body=b"lost order", format=MQFMT_STRING), Reason.MQRC_Q_FULL)
        kept = uow.dead_letter("ORDERS", Message(body=b"old order", format=MQFMT_STRING), Reason.MQRC_Q_FULL)
    page.click("nav >> text=Dead letters")
    page.click("button:has-text('Discard selected')")  # nothing selected: says so, does nothing
    expect(page.locator(".note.refused")).to_have_text("No dead letters selected: nothing was done")
    assert qm.depth(DEAD_LETTER_QUEUE) == 2
    page.click(f"tr[data-msg-id='{lost.hex()}'] a.show")
    expect(page.locator("h1")).to_have_text(f"Dead letter {lost.hex()}")
    expect(page.locator("dd.reason")).to_have_text("MQRC_Q_FULL (2053)")
    page.fill("form.forward input[name=queue]", "REPAIR")
    page.click("button:has-text('Forward the original message')")
    expect(page.locator(".note")).to_have_text("Forwarded 1 of 1 dead letters to REPAIR")
    forwarded = qm.get("REPAIR")
    assert (forwarded.body, forwarded.format, forwarded.msg_id) == (b"lost order", MQFMT_STRING, lost)

    # Discard the other, after its confirmation page.
    page.check(f"input[name=msg_id][value='{kept.hex()}']")
    page.click("button:has-text('Discard selected')")
    expect(page.locator("h1")).to_have_text("Discard 1 dead letters?")
    expect(page.locator("article.message pre.body")).to_have_text("old order")
    assert qm.depth(DEAD_LETTER_QUEUE) == 1
    page.click("button:has-text('Yes, discard 1 dead letters')")
    expect(page.locator(".note")).to_have_text("Discarded 1 of 1 dead letters")
    expect(page.locator("main")).to_contain_text("The dead-letter queue is empty.")
    assert qm.depth(DEAD_LETTER_QUEUE) == 0
    assert errors == []
