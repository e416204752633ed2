"""Self-check quizzes: the engine (questions, grading, loading), the renderers (static HTML
grader, widgets, text/JSON) and the generators that compute answers from ``core`` and the
recorded runs. Imports ``core`` only."""

from course_utils.quiz.engine import (
    GENERATORS,
    LANGS,
    LESSONS,
    STRINGS,
    TYPES,
    Question,
    QuizError,
    expand,
    grade,
    load,
    parse_number,
    quiz_path,
)
from course_utils.quiz.render import (
    add_cli,
    as_json,
    as_text,
    dom_id,
    html,
    live_frontend,
    show,
    widget,
)

__all__ = [
    "GENERATORS",
    "LANGS",
    "LESSONS",
    "STRINGS",
    "TYPES",
    "Question",
    "QuizError",
    "add_cli",
    "as_json",
    "as_text",
    "dom_id",
    "expand",
    "grade",
    "html",
    "live_frontend",
    "load",
    "parse_number",
    "quiz_path",
    "show",
    "widget",
]
