"""Self-check quizzes: the engine (questions, grading, static HTML grader, widgets) and the
generators that compute answers from ``core`` and recorded runs. Imports ``core`` only."""

from course_utils.quiz import engine as _engine

# the public surface is the engine's (course_utils.quiz.show, grade, load, ...)
globals().update({k: v for k, v in vars(_engine).items() if not k.startswith("__")})
