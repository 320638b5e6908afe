#!/usr/bin/env python3
"""Counts the places the compiler flags for a dummy variant (see count-extension-points.sh).

Runs `cargo check --workspace --all-targets` in the current directory, counts its errors,
applies the fixes rustc suggests (an arm for the new variant in a `match`, with `todo!()`), and
checks again, until nothing fails or no suggestion is left: a crate's errors stop the crates
that depend on it from being checked, so one pass would count the first crate's places only.
Prints one `file:line: message` a place, then the count.
"""
import json
import re
import subprocess
import sys


def check():
    out = subprocess.run(
        ["cargo", "check", "--workspace", "--all-targets", "--message-format", "json"],
        capture_output=True, text=True, check=False).stdout
    errors = []
    for line in out.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-message":
            continue
        diagnostic = message["message"]
        if diagnostic["level"] != "error" or not diagnostic["spans"]:
            continue
        errors.append(diagnostic)
    return errors


def suggestions(diagnostic):
    for child in diagnostic.get("children", []):
        for span in child.get("spans", []):
            if span.get("suggested_replacement") is not None:
                yield span


def main():
    places = []
    seen = set()
    for _ in range(20):
        errors = check()
        if not errors:
            break
        edits = {}
        for diagnostic in errors:
            span = next(s for s in diagnostic["spans"] if s["is_primary"]) if any(
                s["is_primary"] for s in diagnostic["spans"]) else diagnostic["spans"][0]
            # The lib and its test target report the same place, naming the type each its way.
            key = (span["file_name"], span["line_start"])
            if key not in seen:
                seen.add(key)
                places.append(f'{span["file_name"]}:{span["line_start"]}: {diagnostic["message"]}')
            for s in suggestions(diagnostic):
                # One fix a place: the lib's and the test target's differ in the path they
                # name the type by (`SyncMode::` or `protocol::SyncMode::`); the shortest is
                # the one in scope.
                fixes = edits.setdefault(s["file_name"], {})
                span = (s["byte_start"], s["byte_end"])
                # rustc names a type of the same crate by its path from the crate's root
                # (`protocol::Pattern`), which is not in scope in a module: from the root.
                replacement = re.sub(r"(?<![\w:])((?!mlless_)[a-z_]+::[A-Z]\w*::DummyExtensionPoint)",
                                     r"crate::\1", s["suggested_replacement"])
                if span not in fixes or len(replacement) < len(fixes[span]):
                    fixes[span] = replacement
        if not edits:
            break
        for name, spans in edits.items():
            with open(name, "rb") as f:
                text = f.read()
            for (start, end), replacement in sorted(spans.items(), reverse=True):
                text = text[:start] + replacement.encode() + text[end:]
            with open(name, "wb") as f:
                f.write(text)
    for place in places:
        print(place)
    print(len(places))


if __name__ == "__main__":
    sys.exit(main())
