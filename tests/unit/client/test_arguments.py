"""Bad input refused at the call, before anything is queued (client/arguments.py): a string,
bytes or a path as the arguments (one task per character), something not iterable, a
``reduce`` that is neither True nor a function, ``errors`` other than raise/return, a timeout
that is not a positive number, a ``retry_on`` that holds no exception: each a TypeError or
ValueError that names the argument and says what to pass. What is right comes back as a list.
The same refusals through ``remote_map`` on a broker: tests/scenarios/test_ctrl_c_cancel_and_refused_calls.py."""
from __future__ import annotations

import operator
from pathlib import Path

import pytest

from rhtc.client.arguments import describe_short, map_arguments, map_call, positive_count, retry_types


@pytest.mark.parametrize("args, want", [(range(3), [0, 1, 2]), ((x for x in "ab"), ["a", "b"]),
                                        ({"k": 1}, ["k"]), ([], []), (["a.root"], ["a.root"])])
def test_what_iterates_becomes_the_list_of_arguments(args, want):
    assert map_call(abs, args) == want


@pytest.mark.parametrize("args, says", [
    ("abc", r"args is the string 'abc': remote_map would run one task per character\. Pass a list of arguments \(\['abc'\]\)"),
    (b"ab", r"args is the bytes object b'ab'"),
    ("data/file.root", r"args is the path 'data/file.root', not a list of arguments\. For ROOT files pass make_chunks"),
    ("root://eos//f.root", r"args is the path 'root://eos//f.root'"),
    ("nano.root", r"args is the path 'nano.root'"),
    (Path("x"), r"args is the path 'x'"),
    (7, r"args must be an iterable of arguments .* not int 7: e\.g\. \[7\] for one task"),
])
def test_arguments_that_are_surely_a_mistake_are_refused_saying_what_to_pass(args, says):
    with pytest.raises(TypeError, match=says):
        map_arguments(args)


def test_a_long_string_is_shown_cut():
    with pytest.raises(TypeError) as err:
        map_arguments("x" * 500)
    assert "x" * 70 in str(err.value) and "x" * 100 not in str(err.value)


@pytest.mark.parametrize("kw, error, says", [
    ({"fn": "abs"}, TypeError, r"fn must be a callable .* not str 'abs'"),
    ({"reduce": "sum"}, TypeError, r"reduce must be True .* not 'sum'"),
    ({"errors": "ignore"}, ValueError, r"errors must be 'raise' .* or 'return' .* not 'ignore'"),
    ({"timeout": 0}, ValueError, r"timeout must be a number of seconds > 0"),
    ({"timeout": -1.0}, ValueError, r"timeout must be"),
    ({"timeout": float("nan")}, ValueError, r"timeout must be"),
    ({"timeout": True}, ValueError, r"timeout must be"),
    ({"timeout": "10"}, ValueError, r"timeout must be"),
])
def test_each_wrong_argument_of_a_call_is_named(kw, error, says):
    call = {"fn": abs, "args": [1], **kw}
    with pytest.raises(error, match=says):
        map_call(call.pop("fn"), call.pop("args"), **call)


@pytest.mark.parametrize("reduce", [None, False, True, operator.add, lambda a, b: a])
def test_reduce_may_be_true_a_function_or_none(reduce):
    assert map_call(abs, [1], reduce=reduce, errors="return", timeout=2.5) == [1]


@pytest.mark.parametrize("retry_on, want", [
    (None, None), (OSError, (OSError,)), ("ChunkFileError", ("ChunkFileError",)),
    ((OSError, "ChunkFileError"), (OSError, "ChunkFileError")), ([KeyboardInterrupt], (KeyboardInterrupt,)),
])
def test_retry_on_is_a_tuple_of_exception_types_or_names(retry_on, want):
    assert retry_types(retry_on) == want


@pytest.mark.parametrize("retry_on, says", [
    (ValueError("x"), r"retry_on must be exception types or their names, e\.g\. .* not ValueError"),
    ((OSError, int), r"retry_on holds <class 'int'>, which is neither"),
    (("not a name",), r"retry_on holds 'not a name'"),
    (3, r"retry_on must be"),
])
def test_retry_on_without_an_exception_is_refused(retry_on, says):
    with pytest.raises(TypeError, match=says):
        retry_types(retry_on)


def test_a_count_is_a_whole_number_above_zero():
    assert positive_count("workers", 3, "how many") == 3
    with pytest.raises(ValueError, match=r"workers must be > 0 \(how many\), not 0"):
        positive_count("workers", 0, "how many")
    for wrong in (2.0, True, "3", None):
        with pytest.raises(TypeError, match=r"workers must be a whole number > 0 \(how many\), not "):
            positive_count("workers", wrong, "how many")


def test_a_value_in_a_message_is_short():
    assert len(describe_short(list(range(1000)))) <= 60
