"""python -m generator [--check]: specs/ -> openapi.json, generated/ (models, config, routes, scopes, paths, errors,
the digest of the bundle Connexion validated),
docs/configuration.md and docs/api.md."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from datamodel_code_generator import InputFileType

from generator import codegen, kinds, reference, spec, translation

ROOT = Path(__file__).resolve().parent.parent


def render(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file and its text; raises spec.SpecError naming each problem."""
    specs = root / "specs"
    doc = spec.bundle(specs)
    ops = spec.operations(doc)
    spec.check_handlers(ops, root / "handlers" / "endpoints")
    translation.check(doc)
    codes = spec.error_codes(doc)
    config_schema = spec.load_yaml(specs / "config.schema.yaml")
    kinds.check(config_schema, root / "handlers" / "inference" / "upstreams")
    bundled = codegen.openapi_json(doc)
    files = {
        root / "openapi.json": bundled,
        root / "generated" / "openapi.json": bundled,  # the served copy, inside the package
        root / "generated" / "base.py": codegen.base(),
        root / "generated" / "models.py": codegen.pydantic_models(doc, InputFileType.OpenAPI, "openapi.json"),
        root / "generated" / "config.py": codegen.pydantic_models(config_schema, InputFileType.JsonSchema, "config.schema.yaml"),
        root / "generated" / "routes.py": codegen.routes(ops),
        root / "generated" / "scopes.py": codegen.scopes(spec.scopes(doc, ops)),
        root / "generated" / "paths.py": codegen.paths(spec.path_patterns(doc)),
        root / "generated" / "errors.py": codegen.errors(codes),
        root / "docs" / "configuration.md": codegen.configuration_md(config_schema),
        root / "docs" / "api.md": reference.api_md(doc, codes, codegen.HEADER),
    }
    # Last, so that the lints above name a problem in their words first.
    files[root / "generated" / "openapi_checked.py"] = codegen.openapi_checked(bundled)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generator", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail with a diff when the generated files are stale")
    args = parser.parse_args(argv)
    try:
        files = render()
    except spec.SpecError as exc:
        print(f"generator: the spec has {len(exc.problems)} problem(s):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    stale = [p for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            old = p.read_text(encoding="utf-8").splitlines(keepends=True) if p.exists() else []
            rel = p.relative_to(ROOT)
            sys.stderr.writelines(difflib.unified_diff(old, files[p].splitlines(keepends=True), f"{rel} (committed)", f"{rel} (from specs/)"))
        if stale:
            print(f"generator: {len(stale)} file(s) are stale; run `python -m generator`", file=sys.stderr)
            return 1
        print("generator: openapi.json and generated/ match specs/")
        return 0
    for p in stale:
        p.write_text(files[p], encoding="utf-8")
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
