"""JSON Schema differences: which are compatible, and Confluent's message for the others.

`COMPATIBLE` is Confluent's strict set (json/diff SchemaDiff.COMPATIBLE_CHANGES_STRICT): a
difference of another type makes the change incompatible. `describe` words one difference as
Confluent's verbose message does (its json/diff Difference.toString, quoting included). Pure.
"""

from __future__ import annotations

COMPATIBLE = frozenset(
    {
        "ID_CHANGED",
        "DESCRIPTION_CHANGED",
        "TITLE_CHANGED",
        "DEFAULT_CHANGED",
        "SCHEMA_REMOVED",
        "TYPE_EXTENDED",
        "MAX_LENGTH_INCREASED",
        "MAX_LENGTH_REMOVED",
        "MIN_LENGTH_DECREASED",
        "MIN_LENGTH_REMOVED",
        "PATTERN_REMOVED",
        "MAXIMUM_INCREASED",
        "MAXIMUM_REMOVED",
        "MINIMUM_DECREASED",
        "MINIMUM_REMOVED",
        "EXCLUSIVE_MAXIMUM_INCREASED",
        "EXCLUSIVE_MAXIMUM_REMOVED",
        "EXCLUSIVE_MINIMUM_DECREASED",
        "EXCLUSIVE_MINIMUM_REMOVED",
        "MULTIPLE_OF_REDUCED",
        "MULTIPLE_OF_REMOVED",
        "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED",
        "REQUIRED_ATTRIBUTE_REMOVED",
        "DEPENDENCY_ARRAY_NARROWED",
        "DEPENDENCY_ARRAY_REMOVED",
        "DEPENDENCY_SCHEMA_REMOVED",
        "MAX_PROPERTIES_INCREASED",
        "MAX_PROPERTIES_REMOVED",
        "MIN_PROPERTIES_DECREASED",
        "MIN_PROPERTIES_REMOVED",
        "ADDITIONAL_PROPERTIES_ADDED",
        "ADDITIONAL_PROPERTIES_EXTENDED",
        "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
        "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "MAX_ITEMS_INCREASED",
        "MAX_ITEMS_REMOVED",
        "MIN_ITEMS_DECREASED",
        "MIN_ITEMS_REMOVED",
        "MAX_CONTAINS_INCREASED",
        "MAX_CONTAINS_REMOVED",
        "MIN_CONTAINS_DECREASED",
        "MIN_CONTAINS_REMOVED",
        "UNIQUE_ITEMS_REMOVED",
        "ADDITIONAL_ITEMS_ADDED",
        "ADDITIONAL_ITEMS_EXTENDED",
        "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
        "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
        "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
        "ENUM_ARRAY_EXTENDED",
        "COMBINED_TYPE_EXTENDED",
        "PRODUCT_TYPE_NARROWED",
        "SUM_TYPE_EXTENDED",
        "NOT_TYPE_NARROWED",
    }
)

_KEYWORD_ADDED_OR_REMOVED = frozenset(
    {
        "MAXIMUM_ADDED",
        "MINIMUM_ADDED",
        "EXCLUSIVE_MAXIMUM_ADDED",
        "EXCLUSIVE_MINIMUM_ADDED",
        "MULTIPLE_OF_ADDED",
        "MAX_LENGTH_ADDED",
        "MIN_LENGTH_ADDED",
        "PATTERN_ADDED",
        "REQUIRED_ATTRIBUTE_ADDED",
        "MAX_PROPERTIES_ADDED",
        "MIN_PROPERTIES_ADDED",
        "DEPENDENCY_ARRAY_ADDED",
        "DEPENDENCY_SCHEMA_ADDED",
        "MAX_ITEMS_ADDED",
        "MIN_ITEMS_ADDED",
        "MAX_CONTAINS_ADDED",
        "MIN_CONTAINS_ADDED",
        "UNIQUE_ITEMS_ADDED",
        "ADDITIONAL_ITEMS_REMOVED",
        "ADDITIONAL_PROPERTIES_REMOVED",
    }
)
_VALUE_INCREASED = frozenset(
    {
        "MIN_LENGTH_INCREASED",
        "MINIMUM_INCREASED",
        "EXCLUSIVE_MINIMUM_INCREASED",
        "MIN_PROPERTIES_INCREASED",
        "MULTIPLE_OF_EXPANDED",
        "MIN_ITEMS_INCREASED",
        "MIN_CONTAINS_INCREASED",
    }
)
_VALUE_DECREASED = frozenset(
    {
        "MAX_LENGTH_DECREASED",
        "MAXIMUM_DECREASED",
        "MAX_ITEMS_DECREASED",
        "MAX_CONTAINS_DECREASED",
        "EXCLUSIVE_MAXIMUM_DECREASED",
        "MAX_PROPERTIES_DECREASED",
    }
)
_VALUE_CHANGED = frozenset({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"})
_TYPE_NARROWED = frozenset(
    {
        "ADDITIONAL_ITEMS_NARROWED",
        "ENUM_ARRAY_NARROWED",
        "SUM_TYPE_NARROWED",
        "ADDITIONAL_PROPERTIES_NARROWED",
    }
)
_TYPE_EXTENDED = frozenset(
    {"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"}
)
_TYPE_CHANGED = frozenset(
    {
        "TYPE_CHANGED",
        "TYPE_NARROWED",
        "COMBINED_TYPE_CHANGED",
        "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
        "ENUM_ARRAY_CHANGED",
    }
)
_ADDED_TO_OPEN = frozenset(
    {
        "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
        "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
        "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
        "ITEM_ADDED_TO_OPEN_CONTENT_MODEL",
    }
)

# (the difference types, the description with {p} = path, {r} = reader label, {w} = writer label)
_DESCRIPTIONS: tuple[tuple[frozenset[str], str], ...] = (
    (
        _KEYWORD_ADDED_OR_REMOVED,
        "The keyword at path '{p}' in the {r} schema is not present in the {w} schema",
    ),
    (_VALUE_INCREASED, "The value at path '{p}' in the {r} schema is more than its value in the {w} schema"),
    (_VALUE_DECREASED, "The value at path '{p}' in the {r} schema is less than its value in the {w} schema"),
    (_VALUE_CHANGED, "The value at path '{p}' is different between the {r} and {w} schema"),
    (
        _TYPE_NARROWED,
        "An array or combined type at path '{p}' has fewer elements in the {r} schema than the {w} schema",
    ),
    (
        _TYPE_EXTENDED,
        "An array or combined type at path '{p}' has more elements in the {r} schema than the {w} schema",
    ),
    (_TYPE_CHANGED, "A type at path '{p}' is different between the {r} schema and the {w} schema"),
    (
        _ADDED_TO_OPEN,
        "The {r} schema has an open content model and has a property or item at path '{p}' which is missing in the {w} schema",
    ),
    (
        frozenset({"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"}),
        "The {r} schema has an unopen content model and has a required property at path '{p}' which is missing in the {w} schema",
    ),
    (
        frozenset({"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"}),
        "The {r} has a closed content model and is missing a property or item present at path '{p}' in the {w} schema",
    ),
    (
        frozenset(
            {
                "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
            }
        ),
        "A property or item is missing in the {r} schema but present at path '{p}' in the {w} schema and is not covered by its partially open content model",
    ),
    (
        frozenset(
            {
                "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
                "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
            }
        ),
        "The {r} schema has a property or item at path '{p}' which is missing in the {w} schema and is not covered by its partially open content model",
    ),
)


def describe(kind: str, path: str, reader_label: str, writer_label: str) -> str:
    """Confluent's one-line message for one JSON Schema difference."""
    description = ""
    for kinds, template in _DESCRIPTIONS:
        if kind in kinds:
            # str.replace, not format: a path holds property names, which may hold braces
            description = (
                template.replace("{r}", reader_label).replace("{w}", writer_label).replace("{p}", path)
            )
            break
    return f'{{errorType:"{kind}", description:"{description}\'}}'
