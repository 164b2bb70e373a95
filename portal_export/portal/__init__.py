"""The partner portal: its shape as configured (shape.py), what its pages offer (page.py), the form
filled (form_fill.py), reading its answers (answers.py) and checking them (record_checks.py), and one
region's export in one HTTP session, login included (session.py)."""

from .answers import HANDLING, read_answer
from .page import parse_page
from .session import Delivery, Prepared, export_once, prepare
from .shape import Login, PortalShape, ShapeError

__all__ = [
    "HANDLING",
    "Delivery",
    "Login",
    "PortalShape",
    "Prepared",
    "ShapeError",
    "export_once",
    "parse_page",
    "prepare",
    "read_answer",
]
