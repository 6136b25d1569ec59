"""A pyautogui-compatible subset for the hvkube desktop guests, over xdotool.

Debian has no pyautogui. Agents written for desktop benchmarks send Python
such as ``import pyautogui; pyautogui.click(100, 200)``; this module accepts
the mouse and keyboard part of pyautogui's API and runs each call as one
xdotool process (argument lists, never a shell). Installed as the
``pyautogui`` package of the image's python3.

Covered: size, position, onScreen, moveTo, moveRel/move, click, leftClick,
doubleClick, tripleClick, rightClick, middleClick, mouseDown, mouseUp,
dragTo, dragRel/drag, scroll/vscroll/hscroll, typewrite/write, press,
keyDown, keyUp, hotkey, hold, sleep, center, isValidKey, the FAILSAFE and
PAUSE settings and pyautogui's key names. Screenshots, image location and
message boxes raise NotImplementedError.
"""

import collections
import contextlib
import os
import re
import subprocess
import sys
import time

__version__ = "0.9.54+hvkube"

# Settings, as in pyautogui. PAUSE is slept after every call (pyautogui's
# default is 0.1 s; 0 here). With FAILSAFE, a call raises FailSafeException
# when the pointer is in a FAILSAFE_POINTS corner before it runs (this costs
# one pointer query per call; set FAILSAFE = False to skip it).
PAUSE = 0.0
FAILSAFE = True
FAILSAFE_POINTS = [(0, 0)]
MINIMUM_DURATION = 0.1
MINIMUM_SLEEP = 0.05
DARWIN_CATCH_UP_TIME = 0.01
LOG_SCREENSHOTS = False

LEFT, MIDDLE, RIGHT, PRIMARY, SECONDARY = "left", "middle", "right", "primary", "secondary"

Point = collections.namedtuple("Point", "x y")
Size = collections.namedtuple("Size", "width height")


class PyAutoGUIException(Exception):
    """An xdotool call failed, or an argument is not valid."""


class FailSafeException(PyAutoGUIException):
    """The pointer was in a fail-safe corner (see FAILSAFE)."""


class ImageNotFoundException(PyAutoGUIException):
    """Never raised here: image location is not supported."""


# --- xdotool ---------------------------------------------------------------

def _x_environment():
    """The environment for xdotool: the caller's, plus the session's display
    and authority file (from /etc/hvkube/image.conf) when they are unset."""
    env = dict(os.environ)
    env["LC_ALL"] = "C.UTF-8"  # xdotool type reads the text in the locale's encoding
    if env.get("DISPLAY") and env.get("XAUTHORITY"):
        return env
    conf = {}
    try:
        with open("/etc/hvkube/image.conf", encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep:
                    conf[key] = value.strip("'\"")
    except OSError:
        pass
    env.setdefault("DISPLAY", conf.get("HVKUBE_DISPLAY", ":0"))
    if "HVKUBE_XAUTHORITY" in conf:
        env.setdefault("XAUTHORITY", conf["HVKUBE_XAUTHORITY"])
    return env


_env = None


def _run(program, *args):
    """Runs program with args and returns its standard output."""
    global _env
    if _env is None:
        _env = _x_environment()
    try:
        proc = subprocess.run([program, *[str(a) for a in args]], env=_env,
                              stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=120)
    except FileNotFoundError:
        raise PyAutoGUIException("%s is not installed" % program) from None
    except subprocess.TimeoutExpired:
        raise PyAutoGUIException("%s did not finish within 120 s" % program) from None
    if proc.returncode != 0:
        msg = proc.stderr.strip() or "exit status %d" % proc.returncode
        raise PyAutoGUIException("%s %s: %s" % (program, args[0], msg))
    for line in proc.stderr.splitlines():  # e.g. unknown key names
        print("pyautogui: %s: %s" % (program, line), file=sys.stderr)
    return proc.stdout


def _xdotool(*args):
    """Runs xdotool (one process; its commands may be chained)."""
    return _run("xdotool", *args)


def _checks():
    if FAILSAFE and tuple(position()) in [tuple(p) for p in FAILSAFE_POINTS]:
        raise FailSafeException(
            "PyAutoGUI fail-safe triggered from the pointer moving to a corner "
            "of the screen. To disable it, set pyautogui.FAILSAFE to False.")


def _sleep_after(pause):
    if pause and PAUSE:
        time.sleep(PAUSE)


def _not_supported(name):
    def f(*args, **kwargs):
        raise NotImplementedError(
            "pyautogui.%s is not supported in this guest (a pyautogui subset "
            "over xdotool: mouse and keyboard only; take screenshots through "
            "the host)" % name)
    f.__name__ = name
    return f


for _name in ("screenshot", "locateOnScreen", "locateCenterOnScreen",
              "locateAllOnScreen", "locate", "locateAll", "locateOnWindow",
              "pixel", "pixelMatchesColor", "alert", "confirm", "prompt",
              "password", "displayMousePosition", "mouseInfo",
              "getActiveWindow", "getWindowsWithTitle", "getAllWindows",
              "getAllTitles", "getActiveWindowTitle", "getWindowsAt",
              "countdown", "run"):
    globals()[_name] = _not_supported(_name)
del _name


# --- tweens (pytweening's, for moveTo/dragTo) ---------------------------------

def linear(n):
    return n


def easeInQuad(n):
    return n * n


def easeOutQuad(n):
    return -n * (n - 2)


def easeInOutQuad(n):
    return 2 * n * n if n < 0.5 else -2 * n * n + 4 * n - 1


# --- screen and pointer -------------------------------------------------------

def size():
    """The screen's size in pixels."""
    w, h = _xdotool("getdisplaygeometry").split()
    return Size(int(w), int(h))


resolution = size


def position(x=None, y=None):
    """The pointer's position; x or y, when given, replace that coordinate."""
    values = dict(line.split("=", 1) for line in
                  _xdotool("getmouselocation", "--shell").split() if "=" in line)
    px, py = int(values["X"]), int(values["Y"])
    return Point(int(x) if x is not None else px, int(y) if y is not None else py)


def onScreen(x, y=None):
    """Whether the point (x, y), or the pair x, lies on the screen."""
    if y is None:
        x, y = x
    w, h = size()
    return 0 <= int(x) < w and 0 <= int(y) < h


def center(box):
    """The center of a (left, top, width, height) box."""
    return Point(int(box[0] + box[2] / 2), int(box[1] + box[3] / 2))


def _xy(x, y):
    """pyautogui's coordinate arguments: (x, y), a pair in x, or None for
    the pointer's current coordinate."""
    if isinstance(x, str):
        raise NotImplementedError(
            "pyautogui: locating an image on the screen (%r) is not supported" % x)
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise PyAutoGUIException("want a point (x, y), got %r" % (x,))
        x, y = x
    if x is None or y is None:
        x, y = position(x, y)
    return max(0, int(round(x))), max(0, int(round(y)))


def _move_args(x, y, duration, tween, start=None):
    """xdotool commands that move the pointer to (x, y): in one step, or over
    duration seconds in small steps (one xdotool process either way)."""
    if duration <= MINIMUM_DURATION:
        return ["mousemove", x, y]
    sx, sy = start if start is not None else position()
    steps = max(2, min(int(duration / MINIMUM_SLEEP), max(abs(x - sx), abs(y - sy), 2)))
    pause = duration / steps
    args = []
    for i in range(1, steps + 1):
        t = tween(i / steps)
        args += ["mousemove", round(sx + (x - sx) * t), round(sy + (y - sy) * t)]
        if i < steps:
            args += ["sleep", "%.3f" % pause]
    return args


def moveTo(x=None, y=None, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    """Moves the pointer to (x, y), over duration seconds."""
    _checks()
    x, y = _xy(x, y)
    _xdotool(*_move_args(x, y, duration, tween))
    _sleep_after(_pause)


def moveRel(xOffset=None, yOffset=None, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    """Moves the pointer by (xOffset, yOffset)."""
    _checks()
    if isinstance(xOffset, (tuple, list)):
        xOffset, yOffset = xOffset
    cx, cy = position()
    x, y = _xy(cx + int(xOffset or 0), cy + int(yOffset or 0))
    _xdotool(*_move_args(x, y, duration, tween, (cx, cy)))
    _sleep_after(_pause)


move = moveRel

_BUTTONS = {"left": 1, "middle": 2, "right": 3, "primary": 1, "secondary": 3}


def _button(button):
    if isinstance(button, int) and 1 <= button <= 9:
        return button
    if isinstance(button, str) and button.lower() in _BUTTONS:
        return _BUTTONS[button.lower()]
    raise PyAutoGUIException(
        "button must be one of 'left', 'middle', 'right', 'primary', "
        "'secondary' or 1..9, not %r" % (button,))


def _move_first(x, y, duration, tween):
    """The move before a click or a press at (x, y), none when both are None."""
    if x is None and y is None:
        return []
    x, y = _xy(x, y)
    return _move_args(x, y, duration, tween)


def click(x=None, y=None, clicks=1, interval=0.0, button=PRIMARY, duration=0.0,
          tween=linear, logScreenshot=False, _pause=True):
    """Clicks button clicks times at (x, y), or where the pointer is."""
    _checks()
    b = _button(button)
    args = _move_first(x, y, duration, tween)
    clicks = int(clicks)
    if clicks > 0:
        args += ["click", "--repeat", clicks, "--delay", max(0, int(interval * 1000)), b]
    if args:
        _xdotool(*args)
    _sleep_after(_pause)


def leftClick(x=None, y=None, interval=0.0, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    click(x, y, 1, interval, LEFT, duration, tween, _pause=_pause)


def rightClick(x=None, y=None, interval=0.0, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    click(x, y, 1, interval, RIGHT, duration, tween, _pause=_pause)


def middleClick(x=None, y=None, interval=0.0, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    click(x, y, 1, interval, MIDDLE, duration, tween, _pause=_pause)


def doubleClick(x=None, y=None, interval=0.0, button=LEFT, duration=0.0, tween=linear,
                logScreenshot=False, _pause=True):
    click(x, y, 2, interval, button, duration, tween, _pause=_pause)


def tripleClick(x=None, y=None, interval=0.0, button=LEFT, duration=0.0, tween=linear,
                logScreenshot=False, _pause=True):
    click(x, y, 3, interval, button, duration, tween, _pause=_pause)


def mouseDown(x=None, y=None, button=PRIMARY, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    """Presses button (and keeps it down) at (x, y), or where the pointer is."""
    _checks()
    _xdotool(*_move_first(x, y, duration, tween), "mousedown", _button(button))
    _sleep_after(_pause)


def mouseUp(x=None, y=None, button=PRIMARY, duration=0.0, tween=linear, logScreenshot=False, _pause=True):
    """Releases button at (x, y), or where the pointer is."""
    _checks()
    _xdotool(*_move_first(x, y, duration, tween), "mouseup", _button(button))
    _sleep_after(_pause)


def dragTo(x=None, y=None, duration=0.0, tween=linear, button=PRIMARY, logScreenshot=False,
           _pause=True, mouseDownUp=True):
    """Drags from the pointer's position to (x, y) with button held, over
    duration seconds (at least a few intermediate moves, so that the
    application sees a drag)."""
    _checks()
    b = _button(button)
    start = position()
    x, y = _xy(x, y)
    args = ["mousedown", b] if mouseDownUp else []
    args += _move_args(x, y, max(duration, MINIMUM_DURATION * 2), tween, start)
    if mouseDownUp:
        args += ["mouseup", b]
    _xdotool(*args)
    _sleep_after(_pause)


def dragRel(xOffset=0, yOffset=0, duration=0.0, tween=linear, button=PRIMARY, logScreenshot=False,
            _pause=True, mouseDownUp=True):
    """Drags by (xOffset, yOffset) from the pointer's position."""
    if isinstance(xOffset, (tuple, list)):
        xOffset, yOffset = xOffset
    cx, cy = position()
    dragTo(cx + int(xOffset or 0), cy + int(yOffset or 0), duration, tween, button,
           _pause=_pause, mouseDownUp=mouseDownUp)


drag = dragRel


def _scroll(clicks, x, y, positive, negative, pause):
    _checks()
    clicks = int(clicks)
    args = _move_first(x, y, 0, linear)
    if clicks:
        args += ["click", "--repeat", abs(clicks), "--delay", 10,
                 positive if clicks > 0 else negative]
    if args:
        _xdotool(*args)
    _sleep_after(pause)


def scroll(clicks, x=None, y=None, logScreenshot=False, _pause=True):
    """Scrolls clicks wheel steps: up when positive, down when negative, at
    (x, y) when given."""
    _scroll(clicks, x, y, 4, 5, _pause)


vscroll = scroll


def hscroll(clicks, x=None, y=None, logScreenshot=False, _pause=True):
    """Scrolls horizontally: right when clicks is positive, left when negative."""
    _scroll(clicks, x, y, 7, 6, _pause)


# --- keyboard -------------------------------------------------------------

# pyautogui's key names (lower case) and the X keysyms they press.
_KEYS = {
    "enter": "Return", "return": "Return", "\n": "Return", "\r": "Return",
    "tab": "Tab", "\t": "Tab", "space": "space", " ": "space",
    "esc": "Escape", "escape": "Escape", "backspace": "BackSpace", "\b": "BackSpace",
    "delete": "Delete", "del": "Delete", "insert": "Insert",
    "up": "Up", "down": "Down", "left": "Left", "right": "Right",
    "home": "Home", "end": "End", "pageup": "Prior", "pgup": "Prior",
    "pagedown": "Next", "pgdn": "Next",
    "ctrl": "Control_L", "ctrlleft": "Control_L", "ctrlright": "Control_R",
    "control": "Control_L",
    "shift": "Shift_L", "shiftleft": "Shift_L", "shiftright": "Shift_R",
    "alt": "Alt_L", "altleft": "Alt_L", "altright": "Alt_R",
    "option": "Alt_L", "optionleft": "Alt_L", "optionright": "Alt_R",
    "win": "Super_L", "winleft": "Super_L", "winright": "Super_R",
    "super": "Super_L", "command": "Super_L", "cmd": "Super_L", "meta": "Super_L",
    "capslock": "Caps_Lock", "numlock": "Num_Lock", "scrolllock": "Scroll_Lock",
    "pause": "Pause", "print": "Print", "printscreen": "Print", "prntscrn": "Print",
    "prtsc": "Print", "prtscr": "Print", "apps": "Menu", "menu": "Menu",
    "clear": "Clear", "help": "Help", "select": "Select", "execute": "Execute",
    "modechange": "Mode_switch", "fn": "XF86WakeUp",
    "add": "KP_Add", "subtract": "KP_Subtract", "multiply": "KP_Multiply",
    "divide": "KP_Divide", "decimal": "KP_Decimal", "separator": "KP_Separator",
    "volumeup": "XF86AudioRaiseVolume", "volumedown": "XF86AudioLowerVolume",
    "volumemute": "XF86AudioMute", "playpause": "XF86AudioPlay",
    "stop": "XF86AudioStop", "nexttrack": "XF86AudioNext", "prevtrack": "XF86AudioPrev",
    "browserback": "XF86Back", "browserforward": "XF86Forward",
    "browserrefresh": "XF86Refresh", "browserhome": "XF86HomePage",
    "browsersearch": "XF86Search", "browserstop": "XF86Stop",
    "browserfavorites": "XF86Favorites", "launchmail": "XF86Mail",
    "launchapp1": "XF86Launch0", "launchapp2": "XF86Launch1", "sleep": "XF86Sleep",
    "kana": "Kana_Lock", "kanji": "Kanji", "hangul": "Hangul", "hanguel": "Hangul",
    "hanja": "Hangul_Hanja", "convert": "Henkan", "nonconvert": "Muhenkan", "yen": "yen",
}
_KEYS.update({"f%d" % i: "F%d" % i for i in range(1, 25)})
_KEYS.update({"num%d" % i: "KP_%d" % i for i in range(10)})
_KEYS.update({
    "!": "exclam", '"': "quotedbl", "#": "numbersign", "$": "dollar", "%": "percent",
    "&": "ampersand", "'": "apostrophe", "(": "parenleft", ")": "parenright",
    "*": "asterisk", "+": "plus", ",": "comma", "-": "minus", ".": "period",
    "/": "slash", ":": "colon", ";": "semicolon", "<": "less", "=": "equal",
    ">": "greater", "?": "question", "@": "at", "[": "bracketleft",
    "\\": "backslash", "]": "bracketright", "^": "asciicircum", "_": "underscore",
    "`": "grave", "{": "braceleft", "|": "bar", "}": "braceright", "~": "asciitilde",
})
KEYBOARD_KEYS = sorted(set(_KEYS) | set("abcdefghijklmnopqrstuvwxyz"
                                        "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
KEY_NAMES = KEYBOARD_KEYS

# Other names are passed to xdotool as X keysym names when they look like
# one with an upper-case letter ("Return", "KP_Enter", "XF86Copy"): never
# an xdotool command (those are lower case), which a chained key list
# would run.
_KEYSYM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


# Characters the keymap lacks (anything beyond ASCII) are bound to spare
# keycodes with xmodmap before xdotool types them, and stay bound. xdotool
# would bind each to a scratch keycode itself and unbind it right after the
# keystroke, before the application has looked it up: the first such
# character of every xdotool run was lost that way.

def _char_keysym(c):
    """The keysym xdotool looks for to type c (Latin-1 or Unicode)."""
    return ord(c) if ord(c) < 0x100 else 0x1000000 | ord(c)


def _needs_binding(c):
    return ord(c) > 0x7E and c.isprintable()


def _keymap():
    """{keycode: [keysym, ...]} of the X keyboard (xmodmap -pk)."""
    keymap = {}
    for line in _run("xmodmap", "-pk").splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():
            keymap[int(fields[0])] = [int(f, 16) for f in fields[1:]
                                      if f.startswith("0x") and int(f, 16)]
    return keymap


def _bound_here(syms):
    """Whether a keycode's keysyms are a binding of ours: one character's
    keysym on every level."""
    return len(set(syms)) == 1 and (0xA0 <= syms[0] <= 0xFF or syms[0] > 0x10000FF)


def _spare(keymap, keep=()):
    """Keycodes free for a binding: unused ones, and ours whose character is
    not in keep (keysyms)."""
    return [code for code, syms in sorted(keymap.items())
            if not syms or _bound_here(syms) and syms[0] not in keep]


def _bind(chars, keymap=None):
    """Binds the characters among chars that the keymap lacks to spare
    keycodes (as many as there are; xdotool binds the rest itself)."""
    need = {}  # keysym -> character, in the order of chars
    for c in chars:
        if _needs_binding(c):
            need.setdefault(_char_keysym(c), c)
    if not need:
        return
    keymap = keymap or _keymap()
    present = {s for syms in keymap.values() for s in syms}
    exprs = []
    for code, sym in zip(_spare(keymap, need), [s for s in need if s not in present]):
        exprs += ["-e", "keycode %d = 0x%x 0x%x" % (code, sym, sym)]
    if exprs:
        _run("xmodmap", *exprs)


def _chunks(text, keymap):
    """text in parts that each need no more bindings than there are spare
    keycodes."""
    capacity = max(1, len(_spare(keymap)))
    parts, start, seen = [], 0, set()
    for i, c in enumerate(text):
        if _needs_binding(c) and c not in seen:
            if len(seen) == capacity:
                parts.append(text[start:i])
                start, seen = i, set()
            seen.add(c)
    return parts + [text[start:]]


# The characters typewrite presses as keys (split keeps them: odd items).
_CONTROLS = re.compile("([\n\r\t]+)")


def _keysym(key):
    """The X keysym for a pyautogui key name or a single character; None
    for a name that is neither (pyautogui ignores those)."""
    if not isinstance(key, str) or key == "":
        return None
    if len(key) == 1:
        if key in _KEYS:
            return _KEYS[key]
        if key.isascii() and key.isalnum():
            return key
        return "U%04X" % ord(key) if ord(key) > 0x1F else None
    name = key.lower()
    if name in _KEYS:
        return _KEYS[name]
    if _KEYSYM_NAME.match(key) and not key.islower():
        return key  # xdotool says "No such key name" and ignores a wrong one
    return None


def isValidKey(key):
    return key in KEYBOARD_KEYS


def _keysyms(keys):
    if isinstance(keys, str):
        keys = [keys]
    _bind([k for k in keys if isinstance(k, str) and len(k) == 1])
    out = []
    for k in keys:
        sym = _keysym(k)
        if sym is None:
            print("pyautogui: unknown key %r ignored" % (k,), file=sys.stderr)
        else:
            out.append(sym)
    return out


def keyDown(key, logScreenshot=False, _pause=True):
    """Presses key and keeps it down."""
    _checks()
    syms = _keysyms(key)
    if syms:
        _xdotool("keydown", *syms)
    _sleep_after(_pause)


def keyUp(key, logScreenshot=False, _pause=True):
    """Releases key."""
    _checks()
    syms = _keysyms(key)
    if syms:
        _xdotool("keyup", *syms)
    _sleep_after(_pause)


def press(keys, presses=1, interval=0.0, logScreenshot=False, _pause=True):
    """Presses and releases each of keys (a name or a list), presses times."""
    _checks()
    syms = _keysyms(keys) * max(0, int(presses))
    if syms:
        _xdotool("key", "--delay", max(0, int(interval * 1000)), *syms)
    _sleep_after(_pause)


def typewrite(message, interval=0.0, logScreenshot=False, _pause=True):
    """Types message: a string (any Unicode text; newlines press Enter), or
    a list of key names pressed one after the other."""
    _checks()
    if isinstance(message, str):
        # --delay is between keystrokes; xdotool's default is 12 ms.
        delay = int(interval * 1000) if interval else 12
        keymap = _keymap() if any(_needs_binding(c) for c in message) else None
        # A line end is the Enter key and a tab the Tab key, as pyautogui
        # presses them: xdotool's type sends a newline as a keysym that
        # LibreOffice, for one, does not take as Enter.
        for n, run in enumerate(_CONTROLS.split(message)):
            if n % 2:
                _xdotool("key", "--delay", delay, *(_KEYS[c] for c in run))
                continue
            parts = _chunks(run, keymap) if keymap else [run] if run else []
            for i, part in enumerate(parts):
                if i:  # the application reads the last part's keystrokes
                    time.sleep(0.5)  # before its keycodes are bound anew
                if keymap:
                    _bind(part, keymap if i == 0 else None)
                _xdotool("type", "--delay", delay, "--", part)
    else:
        syms = _keysyms(list(message))
        if syms:
            _xdotool("key", "--delay", max(0, int(interval * 1000)), *syms)
    _sleep_after(_pause)


write = typewrite


def hotkey(*args, interval=0.0, logScreenshot=False, _pause=True):
    """Presses the keys in order and releases them in reverse order, e.g.
    hotkey('ctrl', 'shift', 't')."""
    _checks()
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    syms = _keysyms(list(args))
    cmds = []
    gap = ["sleep", "%.3f" % interval] if interval > 0 else []
    for s in syms:
        cmds += ["keydown", s] + gap
    for s in reversed(syms):
        cmds += ["keyup", s] + gap
    if gap:
        cmds = cmds[:-len(gap)]
    if cmds:
        _xdotool(*cmds)
    _sleep_after(_pause)


@contextlib.contextmanager
def hold(keys, logScreenshot=False, _pause=True):
    """with hold('shift'): ... keeps keys down inside the block."""
    syms = _keysyms(keys)
    if syms:
        _xdotool("keydown", *syms)
    try:
        yield
    finally:
        if syms:
            _xdotool("keyup", *reversed(syms))
        _sleep_after(_pause)


def sleep(seconds):
    time.sleep(seconds)
