#!/usr/bin/env python3
# Copies code regions of compiled sources into docs/*.md, so that code in the docs compiles.
#
# A region in a source (examples/, tests/, include/):   // example-begin NAME
#                                                         ...
#                                                         // example-end [NAME]
# A place in a doc:                                     <!-- snippet: NAME -->
#                                                       ```cpp
#                                                       (replaced by the region, dedented)
#                                                       ```
# Usage: scripts/sync-doc-snippets.py          rewrite the docs
#        scripts/sync-doc-snippets.py --check  exit 1 if a doc is out of date or names an unknown region
import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("examples", "tests", "include")
SOURCE_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}
BEGIN = re.compile(r"^\s*// example-begin (\S+)\s*$")
END = re.compile(r"^\s*// example-end(?:\s+(\S+))?\s*$")
PLACE = re.compile(r"(<!-- snippet: (\S+) -->\n)```cpp\n.*?```\n", re.S)


def collect_regions():
    regions, errors = {}, []
    for d in SOURCE_DIRS:
        for path in sorted((ROOT / d).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(ROOT).as_posix()
            name, lines = None, []
            for no, line in enumerate(path.read_text().splitlines(), 1):
                m = BEGIN.match(line)
                if m:
                    if name:
                        errors.append(f"{rel}:{no}: example-begin {m.group(1)} inside region {name}")
                    name, lines = m.group(1), []
                elif END.match(line):
                    end_name = END.match(line).group(1)
                    if not name:
                        errors.append(f"{rel}:{no}: example-end without example-begin")
                    elif end_name and end_name != name:
                        errors.append(f"{rel}:{no}: example-end {end_name} closes region {name}")
                    elif name in regions:
                        errors.append(f"{rel}:{no}: region {name} also defined in {regions[name][0]}")
                    else:
                        regions[name] = (rel, textwrap.dedent("\n".join(lines)).strip("\n"))
                    name = None
                elif name:
                    lines.append(line)
            if name:
                errors.append(f"{rel}: region {name} has no example-end")
    return regions, errors


def main():
    check = "--check" in sys.argv[1:]
    regions, errors = collect_regions()
    stale = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()

        def fill(m):
            name = m.group(2)
            if name not in regions:
                errors.append(f"{doc.relative_to(ROOT)}: unknown snippet '{name}'")
                return m.group(0)
            src, code = regions[name]
            return f"{m.group(1)}```cpp\n// {src}\n{code}\n```\n"

        new = PLACE.sub(fill, text)
        if new != text:
            stale.append(doc.relative_to(ROOT).as_posix())
            if not check:
                doc.write_text(new)
    for e in errors:
        print(f"sync-doc-snippets: {e}", file=sys.stderr)
    if check and stale:
        print("sync-doc-snippets: out of date (run scripts/sync-doc-snippets.py): " + ", ".join(stale), file=sys.stderr)
    if errors or (check and stale):
        return 1
    print(("checked" if check else "synced") + f" {len(regions)} regions; " +
          (f"updated {', '.join(stale)}" if stale and not check else "docs up to date"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
