#!/usr/bin/python3
"""validate_schema.py SCHEMA [JSONFILE...]
validate_schema.py --self SCHEMA...

Checks that SCHEMA is itself a valid JSON Schema (for the draft its $schema names), then
validates each JSONFILE against it; with --self, checks each SCHEMA and nothing more. Prints every violation as `FILE: at PATH: MESSAGE` on
stderr and exits 1 if there is any; exits 2 on a usage error or an unreadable file.
Also importable: validate(schema, instance) returns the list of violation strings.
"""
import json
import os
import sys

import jsonschema


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../schemas")


def schema_store(schema):
    """The schemas a $ref may name, by $id: the tree's schemas/ and `schema` itself (which may
    be an installed copy). Nothing is fetched from the network."""
    store = {}
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".schema.json"):
            s = load(os.path.join(SCHEMA_DIR, name))
            store[s["$id"]] = s
    if "$id" in schema:
        store[schema["$id"]] = schema
    return store


def validator_for(schema):
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)  # raises jsonschema.SchemaError
    store = schema_store(schema)
    try:  # jsonschema 4.18 and later resolve references through `referencing`
        import referencing
        registry = referencing.Registry().with_resources(
            (uri, referencing.Resource.from_contents(s)) for uri, s in store.items())
        return cls(schema, registry=registry)
    except ImportError:  # Debian 12's 4.10
        return cls(schema, resolver=jsonschema.RefResolver.from_schema(schema, store=store))


def where(error):
    return "/" + "/".join(str(p) for p in error.absolute_path)


def validate(schema, instance):
    v = validator_for(schema)
    errors = sorted(v.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"at {where(e)}: {e.message}" for e in errors]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    if argv[1] == "--self":
        return max([check_self(p) for p in argv[2:]] or [2])
    return check_files(argv[1], argv[2:])


def check_self(schema_path):
    return check_files(schema_path, [])


def check_files(schema_path, files):
    try:
        schema = load(schema_path)
        validator = validator_for(schema)
    except (OSError, ValueError) as e:
        print(f"validate_schema: error: '{schema_path}': {e}", file=sys.stderr)
        return 2
    except jsonschema.SchemaError as e:
        print(f"validate_schema: error: '{schema_path}': not a valid schema: at "
              f"{'/' + '/'.join(map(str, e.absolute_path))}: {e.message}", file=sys.stderr)
        return 1
    failed = False
    for path in files:
        try:
            instance = load(path)
        except (OSError, ValueError) as e:
            print(f"validate_schema: error: '{path}': {e}", file=sys.stderr)
            return 2
        for e in sorted(validator.iter_errors(instance),
                        key=lambda e: list(map(str, e.absolute_path))):
            print(f"validate_schema: error: '{path}': at {where(e)}: {e.message}",
                  file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
