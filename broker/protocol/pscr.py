"""``<pscr>`` responses: what the broker answers a command with, and how a client reads it.

The broker writes strictly what IBM documents (reference section 3.1), because
IBM's clients (the JMS "broker V2" provider, rfhutil, the AMQSPR2A sample)
parse it: ``Completion`` always first; on success optional FullResp attributes
as elements in order; on a warning one ``<Response>`` per problem and on an
error exactly one; for warning and error the original ``<psc>`` folder is
returned as a separate NameValueData after ``<pscr>``, verbatim (it is the
client's own folder, echoed, not ours to reformat).

Extensions: a ``<Response>`` may carry ``<Parameter>``, the name of the ``<psc>``
element that failed (for example ``RegOpt``), after ``<Topic>``, and then ``<Detail>``,
why the broker refused the command, in words. IBM's response has neither element; IBM
clients ignore elements they do not know.

Text is escaped for element content: ``&``, ``<``, ``>`` always, and carriage
return as ``&#13;`` so that parsers do not normalise it to a line feed.
Characters XML 1.0 cannot carry even as references (C0 controls other than tab,
line feed and carriage return, lone surrogates, U+FFFE, U+FFFF) are stripped:
an answer must always be writable, even about a topic it cannot repeat exactly.

Reading is lenient, as a client should be: IBM's documentation spells the end
tag ``</Reponse>``, whitespace between elements is ignored, the echoed ``<psc>``
may be missing, and unknown elements inside a ``<Response>`` are skipped.
Anything that is not a response (no or two ``<pscr>`` folders, malformed XML,
a Completion other than ok/warning/error, a Response without a decimal Reason,
an error without exactly one Response) is :class:`PscrError`, reason 2337.

A :class:`Response` checks its own shape when built, so the broker cannot write
a response that IBM's clients would reject; building one wrongly is the same
PscrError.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lxml import etree

from broker.protocol import psc, rfh2
from broker.protocol.psc import PscError, escape_text, load_folder
from queues.errors import MQError
from queues.reasons import Reason

FOLDER = "pscr"  # the root element of a response folder
OK = "ok"
WARNING = "warning"
ERROR = "error"
_COMPLETIONS = frozenset({OK, WARNING, ERROR})
_RESERVED = frozenset({"Completion", "Response"})
_ITEM_ELEMENTS = frozenset({"Reason", "Topic", "Parameter", "Detail"})
_ELEMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_REASON = re.compile(r"-?[0-9]{1,10}")
_MISSPELT_END = re.compile(r"</Reponse\s*>")


class PscrError(MQError):
    """A response that is not a valid ``<pscr>`` (MQRC_RFH_PARM_ERROR, 2337)."""

    def __init__(self, message: str) -> None:
        super().__init__(Reason.MQRC_RFH_PARM_ERROR, message)


@dataclass(frozen=True, slots=True)
class ResponseItem:
    """One ``<Response>``: a reason and, when known, the topic and element at fault and why."""

    reason: int
    topic: str | None = None
    parameter: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Response:
    """A whole answer; build it with :func:`ok`, :func:`warning` or :func:`error`."""

    completion: str
    items: tuple[ResponseItem, ...] = ()
    attributes: tuple[tuple[str, str], ...] = ()
    echoed_psc: str | None = None

    def __post_init__(self) -> None:
        problem = _shape_problem(self)
        if problem:
            raise PscrError(problem)


def _shape_problem(response: Response) -> str | None:
    if response.completion not in _COMPLETIONS:
        return f"Completion {response.completion!r} is not ok, warning or error"
    if response.completion == OK:
        if response.items or response.echoed_psc is not None:
            return "an ok response has no <Response> and no echoed <psc>"
    elif response.attributes:
        return "only an ok response carries attributes"
    elif not response.items:
        return f"a {response.completion} response needs a <Response>"
    elif response.completion == ERROR and len(response.items) > 1:
        return "an error response has exactly one <Response>"
    for name, _ in response.attributes:
        if name in _RESERVED or _ELEMENT_NAME.fullmatch(name) is None:
            return f"{name!r} cannot be a response attribute"
    return None


def ok(attributes: Iterable[tuple[str, str]] = ()) -> Response:
    """Success; ``attributes`` are the FullResp attributes, in order, names may repeat."""
    return Response(OK, attributes=tuple(attributes))


def warning(items: Iterable[ResponseItem], echoed_psc: str | None) -> Response:
    """Partial success: one item per problem (e.g. 3081 per unauthorised topic)."""
    return Response(WARNING, items=tuple(items), echoed_psc=echoed_psc)


def error(item: ResponseItem, echoed_psc: str | None) -> Response:
    """Failure: nothing was done; IBM reports only the first error."""
    return Response(ERROR, items=(item,), echoed_psc=echoed_psc)


def to_folders(response: Response) -> tuple[str, ...]:
    """The NameValueData folders of the reply: ``<pscr>``, then the echoed ``<psc>`` if any."""
    parts = ["<pscr><Completion>", response.completion, "</Completion>"]
    for name, value in response.attributes:
        parts += ("<", name, ">", escape_text(value), "</", name, ">")
    for item in response.items:
        parts += ("<Response><Reason>", str(int(item.reason)), "</Reason>")
        if item.topic is not None:
            parts += ("<Topic>", escape_text(item.topic), "</Topic>")
        if item.parameter is not None:
            parts += ("<Parameter>", escape_text(item.parameter), "</Parameter>")
        if item.detail is not None:
            parts += ("<Detail>", escape_text(item.detail), "</Detail>")
        parts.append("</Response>")
    parts.append("</pscr>")
    pscr = "".join(parts)
    return (pscr,) if response.echoed_psc is None else (pscr, response.echoed_psc)


def parse_folders(folders: Sequence[str]) -> Response:
    """The response in a reply's folders (client side); other folders are ignored."""
    responses, others = rfh2.find(folders, FOLDER, strict=False)
    if len(responses) > 1:
        raise PscrError("more than one <pscr> folder")
    if not responses:
        raise PscrError("no <pscr> folder")
    echoed = rfh2.find(others, psc.FOLDER, strict=False)[0]
    return _response(_root(responses[0]), echoed[0] if echoed else None)


def _root(pscr: str) -> etree._Element:
    try:
        return load_folder(_MISSPELT_END.sub("</Response>", pscr), "pscr")
    except PscError as exc:
        raise PscrError(exc.detail) from None


def _response(root: etree._Element, echoed: str | None) -> Response:
    _check_flat_text(root)
    completion: str | None = None
    items: list[ResponseItem] = []
    attributes: list[tuple[str, str]] = []
    for child in root:
        name = child.tag
        if name == "Response":
            items.append(_item(child))
            continue
        if len(child):
            raise PscrError(f"<{name}> in <pscr> has nested elements")
        if name == "Completion":
            if completion is not None:
                raise PscrError("<Completion> given twice")
            completion = (child.text or "").strip()
        else:
            attributes.append((str(name), child.text or ""))
    if completion is None:
        raise PscrError("<pscr> has no <Completion>")
    return Response(completion, tuple(items), tuple(attributes), echoed)


def _item(element: etree._Element) -> ResponseItem:
    _check_flat_text(element)
    values: dict[str, str] = {}
    for child in element:
        if len(child):
            raise PscrError(f"<{child.tag}> in <Response> has nested elements")
        name = child.tag
        if name in _ITEM_ELEMENTS:
            if name in values:
                raise PscrError(f"<{name}> given twice in one <Response>")
            values[name] = child.text or ""
    reason = values.get("Reason", "").strip()
    if _REASON.fullmatch(reason) is None:
        raise PscrError(f"<Response> needs a decimal <Reason>, not {reason!r}")
    return ResponseItem(int(reason), values.get("Topic"), values.get("Parameter"), values.get("Detail"))


def _check_flat_text(element: etree._Element) -> None:
    """Whitespace between elements is layout; any other loose text is not a response."""
    texts = [element.text, *(child.tail for child in element)]
    if any(text and not text.isspace() for text in texts):
        raise PscrError(f"text outside any element in <{element.tag}>")
