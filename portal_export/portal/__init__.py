"""The partner portal: what its pages offer (page.py), reading its answers (answers.py), and one
region's export in one HTTP session, login included (session.py)."""

from .answers import HANDLING, read_answer
from .page import Form, Page, Widget, parse_page
from .session import Delivery, Login, Post, Prepared, export_once, prepare

__all__ = [
    "HANDLING",
    "Delivery",
    "Form",
    "Login",
    "Page",
    "Post",
    "Prepared",
    "Widget",
    "export_once",
    "parse_page",
    "prepare",
    "read_answer",
]
