"""OpenAPI links: which operation's response names the resource another operation takes.

An operation on ``/retained/{retained_id}`` or ``/dead-letters/{msg_id}/retry`` is only
worth calling with an id that exists. The links say where such ids come from (the listing,
or the creation's response), so that a client generator, or a fuzzer testing the API's
contract, follows them from one operation to the next instead of guessing ids.
"""

from __future__ import annotations

from typing import Any

# (method, path, status) of the response -> {link name: (method, path of the target, parameters)}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str]]]] = {}


def _add(source: tuple[str, str, str], value: str, parameter: str, targets: list[tuple[str, str]]) -> None:
    links = LINKS.setdefault(source, {})
    for method, path in targets:
        words = [part.capitalize() for part in path.split("/") if part[:1].isalpha()]
        name = method.capitalize() + "".join(words)
        links[name] = (method, path, {parameter: value})


_QUEUE = [
    ("get", "/api/v1/queues/{name}"),
    ("patch", "/api/v1/queues/{name}"),
    ("delete", "/api/v1/queues/{name}"),
    ("get", "/api/v1/queues/{name}/messages"),
    ("post", "/api/v1/queues/{name}/messages"),
    ("post", "/api/v1/queues/{name}/purge"),
]
_add(("post", "/api/v1/queues", "201"), "$response.body#/name", "name", _QUEUE)
_add(("get", "/api/v1/queues", "200"), "$response.body#/items/0/name", "name", _QUEUE)
_SUBSCRIPTION = [
    ("get", "/api/v1/subscriptions/{subscription_id}"),
    ("delete", "/api/v1/subscriptions/{subscription_id}"),
]
_add(
    ("post", "/api/v1/subscriptions", "201"),
    "$response.body#/subscriptions/0/id",
    "subscription_id",
    _SUBSCRIPTION,
)
_add(("get", "/api/v1/subscriptions", "200"), "$response.body#/items/0/id", "subscription_id", _SUBSCRIPTION)
_RETAINED = [("get", "/api/v1/retained/{retained_id}"), ("delete", "/api/v1/retained/{retained_id}")]
_add(("get", "/api/v1/retained", "200"), "$response.body#/items/0/id", "retained_id", _RETAINED)
_DEAD_LETTER = [("post", "/api/v1/dead-letters/{msg_id}/retry")]
_add(("get", "/api/v1/dead-letters", "200"), "$response.body#/items/0/msg_id", "msg_id", _DEAD_LETTER)
_RULE = [("put", "/api/v1/acl/rules/{rule_id}"), ("delete", "/api/v1/acl/rules/{rule_id}")]
_add(("post", "/api/v1/acl/rules", "201"), "$response.body#/id", "rule_id", _RULE)
_add(("get", "/api/v1/acl/rules", "200"), "$response.body#/items/0/id", "rule_id", _RULE)
_TOKEN = [("delete", "/api/v1/tokens/{token_id}")]
_add(("post", "/api/v1/tokens", "201"), "$response.body#/id", "token_id", _TOKEN)
_NEIGHBOUR = [("get", "/api/v1/neighbours/{name}"), ("delete", "/api/v1/neighbours/{name}")]
_add(("post", "/api/v1/neighbours", "201"), "$response.body#/neighbour/name", "name", _NEIGHBOUR)
_add(("get", "/api/v1/neighbours", "200"), "$response.body#/0/name", "name", _NEIGHBOUR)


def _pointer(path: str) -> str:
    return path.replace("~", "~0").replace("/", "~1")


def add_links(document: dict[str, Any]) -> None:
    """Write :data:`LINKS` into ``document``'s responses (operations it lacks are skipped)."""
    paths = document["paths"]
    for (method, path, status), links in LINKS.items():
        response = paths.get(path, {}).get(method, {}).get("responses", {}).get(status)
        if response is None:
            continue
        response["links"] = {
            name: {
                "operationRef": f"#/paths/{_pointer(target)}/{target_method}",
                "parameters": parameters,
            }
            for name, (target_method, target, parameters) in links.items()
            if target_method in paths.get(target, {})
        }
