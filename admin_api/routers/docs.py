"""``/docs``: the OpenAPI document rendered by Swagger UI, served from the package.

The broker runs on hosts without internet access, so the page loads Swagger UI from
``/static/swagger-ui`` (swagger-ui-dist 5, Apache 2.0, vendored with its licence), never
from a CDN. It carries the console's headers: no inline script (Swagger UI is started by
``/static/docs/swagger-init.js``), no framing.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from admin_api.console.pages import HEADERS

router = APIRouter(include_in_schema=False)

SWAGGER_UI = "/static/swagger-ui"
PAGE = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wmq-psc-broker admin API</title>
<link rel="stylesheet" href="{SWAGGER_UI}/swagger-ui.css">
<link rel="icon" href="{SWAGGER_UI}/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui" data-openapi="/openapi.json"></div>
<script src="{SWAGGER_UI}/swagger-ui-bundle.js"></script>
<script src="/static/docs/swagger-init.js"></script>
</body>
</html>
"""


@router.get("/docs")
def docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers=HEADERS)
