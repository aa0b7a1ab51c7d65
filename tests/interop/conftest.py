import trace_gym  # noqa: F401 - registers the built-in envs
from tests import toy_library  # noqa: F401 - registers trace/test-library-v0
