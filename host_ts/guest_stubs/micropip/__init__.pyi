"""micropip 0.11.1 (a guest wheel), as far as the guest glue uses it."""

async def install(
    requirements: str | list[str],
    keep_going: bool = False,
    deps: bool = True,
    credentials: str | None = None,
    pre: bool = False,
    index_urls: list[str] | str | None = None,
    *,
    constraints: list[str] | None = None,
    reinstall: bool = False,
    verbose: bool | int | None = None,
) -> None: ...
def uninstall(packages: str | list[str], *, verbose: bool | int = False) -> None: ...
