"""``/docs``: the OpenAPI document rendered by Swagger UI, served from the package.

The broker runs on hosts without internet access, so the page loads Swagger UI from
``/static/swagger-ui`` (swagger-ui-dist 5, Apache 2.0, vendored with its licence), never
from a CDN.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)

SWAGGER_UI = "/static/swagger-ui"


@router.get("/docs")
def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="wmq-psc-broker admin API",
        swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css",
        swagger_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
    )
