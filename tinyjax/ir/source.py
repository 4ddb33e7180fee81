"""Where the user's code is: whether a file is tinyjax's own, and the user's line that made a call."""
import os
import sys

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # tinyjax/, with its separator


def is_tinyjax_file(filename: str) -> bool:
  """Whether `filename` (a code object's: absolute for every imported module) is one of tinyjax's files.

  NB: a plain prefix test, no path normalisation: user_source asks it of every frame of every traced call."""
  return filename.startswith(PACKAGE_DIR)


def user_source() -> str:
  """file:line of the innermost caller outside tinyjax (where the user's value was made)."""
  frame = sys._getframe(1)
  while frame is not None and is_tinyjax_file(frame.f_code.co_filename):
    frame = frame.f_back
  return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "<unknown>"
