"""The partner portal: what its pages offer (page.py), reading its answers (answers.py), and one
region's export in one HTTP session, login included (session.py)."""

from .answers import HANDLING, read_answer
from .page import parse_page
from .session import Delivery, Login, Prepared, export_once, prepare

__all__ = ["HANDLING", "Delivery", "Login", "Prepared", "export_once", "parse_page", "prepare", "read_answer"]
