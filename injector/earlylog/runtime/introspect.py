"""Reading the program's objects without running the program's code: the primitives that every
module looking into live objects at dump time reads through (waits.py, syncs.py, holders.py,
signals.py, aio.py, greenlets.py, cells.py, stacks.py, children.py, peers.py, filelocks.py). It
owns the contract below and must never break it; it imports nothing but `ast` (in resolve(),
for its node types), never blocks and never raises (a read that cannot be done safely gives
None, {}, () or (False, None)).

The contract, as these functions keep it:
- Classes are compared by identity only: isa() walks type(obj)'s MRO with `is`, never calling
  isinstance(), __class__, __instancecheck__ or a metaclass's __eq__.
- A class's MRO and namespace are read through `type`'s own C descriptors
  (type.__dict__["__mro__"] and ["__dict__"]), never through the class's or its metaclass's
  attributes (mro(), class_dict(), lookup()).
- An object's __dict__ is read only through the standard C `__dict__` descriptor (or a module's
  own member descriptor), and only when that gives an exact dict: a class that defines __dict__
  itself (a property) is not read (instance_dict(), field()).
- An attribute is read from the instance's own dict, else from the class namespaces only as a
  plain value whose type has no __get__, or through a __slots__ member descriptor (its C __get__
  reads the slot); a property, any other descriptor, __getattr__ and __getattribute__ are never
  called: the attribute is reported unreadable (attribute()).
- resolve() follows only names (the frame's locals, globals, builtins, in that order), attribute
  chains (as attribute()), and subscripts of an exact dict, list or tuple by an exact str or int
  key.
- Dicts are only looked up by a str (or, in resolve(), int) key: no getattr(), __repr__,
  __str__, __eq__, __bool__, __len__ or iteration of a program object runs here. A frame's
  locals are frame.f_locals: the interpreter's own mapping of the function's variables (3.13+:
  its C proxy). The one gap: in a class body whose metaclass's __prepare__ returned a mapping
  of its own, that mapping's `in` and `[]` are the program's code.
What a caller does with the values found is the caller's to keep to the same rule (its module
docstring says how). It runs in the watchdog thread only (dumps, and runtime/stuck.py's beats),
loaded with the first module that reads through it, under threads.gated."""
import sys

_MODULE = type(sys)
_MEMBER = type(type.__dict__["__basicsize__"])  # a __slots__ field's descriptor
_GETSET = type(type.__dict__["__dict__"])       # the standard __dict__ descriptor


def resolve(expr, frame):
    """(True, value) of a name, attribute chain or constant/name-indexed subscript, read from
    dicts only; (False, None) when it cannot be read that way."""
    import _ast as ast  # the node classes alone (runtime/syntax.py says why not `ast`)
    if isinstance(expr, ast.Name):
        for scope in (frame_locals(frame), frame.f_globals, frame.f_builtins):
            if expr.id in scope:
                return True, scope[expr.id]
        return False, None
    if isinstance(expr, ast.Attribute):
        found, base = resolve(expr.value, frame)
        return attribute(base, expr.attr) if found else (False, None)
    if isinstance(expr, ast.Subscript):
        found, base = resolve(expr.value, frame)
        if isinstance(expr.slice, ast.Constant):
            found_key, key = True, expr.slice.value
        else:
            found_key, key = resolve(expr.slice, frame)
        if found and found_key and (type(key) is str or type(key) is int) and \
                (type(base) is dict or type(base) is list or type(base) is tuple):
            try:
                return True, base[key]
            except (KeyError, IndexError):
                pass
    return False, None


def frame_locals(frame):
    """A frame's locals, or {} when reading them fails (never raises)."""
    try:
        scope = frame.f_locals
    except Exception:
        return {}
    return scope if scope is not None else {}


def local(frame, name):
    scope = frame_locals(frame)
    return scope[name] if name in scope else None


def attribute(obj, name):
    """(True, value) of obj.name from its own dict, else a class's plain (non-descriptor) value or
    a __slots__ field; (False, None) for anything that would run code (property, __getattr__)."""
    if isa(obj, type):
        owners = mro(obj)
    else:
        own = instance_dict(obj)
        if own is not None and name in own:
            return True, own[name]
        owners = mro(type(obj))
    for klass in owners:
        space = class_dict(klass)
        if name in space:
            value = space[name]
            if type(value) is _MEMBER and not isa(obj, type):
                try:
                    return True, value.__get__(obj, type(obj))  # C: reads the slot
                except AttributeError:
                    return False, None
            return (False, None) if lookup(type(value), "__get__") is not None else (True, value)
    return False, None


def field(obj, name):
    """An object's own attribute from its instance dict, or None."""
    own = instance_dict(obj)
    return own.get(name) if own is not None else None


def instance_dict(obj):
    """obj's __dict__ through the standard descriptor only (never a class's own __dict__ property)."""
    descr = lookup(type(obj), "__dict__")
    if type(descr) is not _GETSET and not (type(descr) is _MEMBER and isa(obj, _MODULE)):
        return None
    try:
        own = descr.__get__(obj, type(obj))
    except Exception:
        return None
    return own if type(own) is dict else None


def mro(cls):
    try:
        return type.__dict__["__mro__"].__get__(cls)
    except Exception:
        return ()


def class_dict(cls):
    try:
        return type.__dict__["__dict__"].__get__(cls)
    except Exception:
        return {}


def lookup(cls, name):
    for klass in mro(cls):
        space = class_dict(klass)
        if name in space:
            return space[name]
    return None


def isa(obj, cls):
    """isinstance by identity in the MRO: never asks the object's __class__ or a metaclass's __eq__."""
    return any(k is cls for k in mro(type(obj)))


def stdlib(module, name):
    """A class of a stdlib module the program imported, or None (this module never imports them)."""
    cls = module_dict(module).get(name)
    return cls if isa(cls, type) else None


def module_dict(name):
    return instance_dict(sys.modules.get(name)) or {}


def thread_name(thread, ident):
    name = field(thread, "_name") if thread is not None else None
    return name if type(name) is str else "0x%x" % ident


def outward(frame, limit):
    """frame and its callers, innermost first, at most limit of them."""
    while frame is not None and limit > 0:
        yield frame
        frame = frame.f_back
        limit -= 1
