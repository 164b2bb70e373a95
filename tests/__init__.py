"""The suite, by room: portal_export/, tasks/, ops/ (unit and in-process tests of each), live/ (the
real CLI against the sandbox), fleet/ (hosts in namespaces of their own), sandbox/ (the stand-ins
themselves), repo/ (layout, docs, recipes); helpers/ holds what they share, and
each room's conftest.py its fixtures."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
