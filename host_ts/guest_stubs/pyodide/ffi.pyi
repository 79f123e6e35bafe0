from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar

_T = TypeVar("_T")
_P = ParamSpec("_P")

class JsProxy: ...

class JsDoubleProxy(JsProxy, Generic[_T]):
    def destroy(self) -> None: ...
    def unwrap(self) -> _T: ...

class JsCallableDoubleProxy(JsDoubleProxy[Callable[_P, _T]], Generic[_P, _T]):
    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _T: ...

def create_proxy(
    obj: Callable[_P, _T], /, *, capture_this: bool = False, roundtrip: bool = True
) -> JsCallableDoubleProxy[_P, _T]: ...
def to_js(
    obj: Any,
    /,
    *,
    depth: int = -1,
    pyproxies: JsProxy | None = None,
    create_pyproxies: bool = True,
    dict_converter: Callable[[Iterable[Any]], Any] | None = None,
    default_converter: Any = None,
    eager_converter: Any = None,
) -> Any: ...
def run_sync(x: Awaitable[_T], /) -> _T: ...
def can_run_sync() -> bool: ...
