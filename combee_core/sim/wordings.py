"""Hand-written phrasings from which honest mode words the suite's rules (``docs/simulator.md``, "Honest mode").

Data only. A rule is (subject, action): a wording picks one subject phrasing, one action phrasing (of the rule or of
its opposite) and one sentence structure. Written once, before any benchmark run; not edited after one.
"""

from __future__ import annotations

SUBJECT_PHRASINGS: dict[str, tuple[str, str, str]] = {
    "invoice totals": ("invoice totals", "the total of an invoice", "billed amounts"),
    "percent changes": ("percent changes", "percentage growth", "the relative change between two values"),
    "compound interest": ("compound interest", "interest that compounds", "a balance growing with compounding"),
    "unit prices": ("unit prices", "the price per item", "cost per unit"),
    "currency conversion": ("currency conversion", "converting between currencies", "exchange-rate calculations"),
    "tax rates": ("tax rates", "applying a tax percentage", "sales tax"),
    "fiscal quarters": ("fiscal quarters", "quarters of the financial year", "quarterly reporting periods"),
    "leap years": ("leap years", "years with a February 29", "366-day years"),
    "time zones": ("time zones", "timestamps from different regions", "clock offsets between places"),
    "date ranges": ("date ranges", "spans between two dates", "periods from one date to another"),
    "rounding": ("rounding", "rounding numbers", "how numbers are rounded"),
    "thousands separators": ("thousands separators", "digit grouping with commas", "large numbers with separators"),
    "negative numbers": ("negative numbers", "values below zero", "minus amounts"),
    "ratios": ("ratios", "one quantity relative to another", "proportions"),
    "averages": ("averages", "mean values", "the arithmetic mean"),
    "medians": ("medians", "the middle value of a list", "the 50th percentile"),
    "table lookups": ("table lookups", "finding values in a table", "reading a cell from a table"),
    "missing values": ("missing values", "gaps in the data", "absent entries"),
    "API pagination": ("API pagination", "paged API results", "results split over pages"),
    "retry limits": ("retry limits", "how often to retry", "repeated attempts after a failure"),
    "file paths": ("file paths", "paths to files", "file locations on disk"),
    "CSV headers": ("CSV headers", "the header line of a CSV file", "column names in CSV data"),
    "sorting order": ("sorting order", "ordering results", "how lists are sorted"),
    "string casing": ("string casing", "upper and lower case in text", "letter case"),
    "null checks": ("null checks", "testing for null", "values that may be null"),
    "ID formats": ("ID formats", "identifier formats", "the shape of record identifiers"),
    "weekday names": ("weekday names", "names of the days of the week", "day-of-week labels"),
    "month lengths": ("month lengths", "days in a month", "how long each month is"),
    "basis points": ("basis points", "hundredths of a percent", "bps figures"),
    "significant figures": ("significant figures", "significant digits", "the precision of a measured value"),
    "scientific notation": ("scientific notation", "exponent notation", "numbers written as powers of ten"),
    "ranges": ("ranges", "intervals of values", "lower and upper bounds"),
}
"""Three phrasings of each subject of ``combee_core.sim.task_suite._SUBJECTS`` (the first is the suite's own)."""

ActionPhrasings = tuple[str, str, str, str]

ACTION_PHRASINGS: dict[str, tuple[ActionPhrasings, ActionPhrasings]] = {
    "apply the discount before the tax": (
        ("apply the discount before the tax", "take the discount off first and add tax afterwards",
         "compute tax on the discounted amount", "subtract any reduction before taxing the price"),
        ("apply the tax before the discount", "add tax first and take the discount off afterwards",
         "compute tax on the undiscounted amount", "tax the full price before any reduction"),
    ),
    "divide by the earlier value, not the later one": (
        ("divide by the earlier value, not the later one", "use the starting value as the denominator",
         "take the older figure as the base of the division", "the base is the first value in time, so divide by it"),
        ("divide by the later value, not the earlier one", "use the ending value as the denominator",
         "take the newer figure as the base of the division", "the base is the last value in time, so divide by it"),
    ),
    "convert to the same unit first": (
        ("convert to the same unit first", "bring every quantity to one unit before calculating",
         "make the units match before doing any arithmetic", "unify the measurement units up front"),
        ("compute with the units as given and convert at the end",
         "do the arithmetic on mixed units, converting only the result",
         "leave each quantity in its own unit while calculating",
         "postpone unit conversion until after the calculation"),
    ),
    "count the end date as included": (
        ("count the end date as included", "include the last day in the count",
         "treat the final date as part of the range", "the closing date counts, so add it"),
        ("leave the end date out of the count", "exclude the last day from the count",
         "treat the final date as outside the range", "the closing date does not count, so drop it"),
    ),
    "keep two decimal places": (
        ("keep two decimal places", "show results to two decimals",
         "report values with exactly 2 digits after the point", "round to the nearest hundredth"),
        ("round to whole numbers", "show results without decimals",
         "report values with no digits after the point", "round to the nearest integer"),
    ),
    "read the header row before the data": (
        ("read the header row before the data", "parse the first row as column names",
         "take the top line as headings, not as a record", "start by reading the column titles"),
        ("treat the first row as data", "parse the first row as a record",
         "take the top line as a record, not as headings", "start reading values from the very first line"),
    ),
    "use the last page token until it is empty": (
        ("use the last page token until it is empty", "keep following the next-page token until none is returned",
         "request further pages while a continuation token remains",
         "loop over pages until the cursor comes back empty"),
        ("stop after the first page", "read only the first page of results", "ignore the continuation token",
         "make a single request and skip later pages"),
    ),
    "normalise to UTC before comparing": (
        ("normalise to UTC before comparing", "convert both times to UTC and then compare",
         "compare timestamps only after mapping them to universal time",
         "put every time in UTC before any comparison"),
        ("compare in local time without converting", "compare the times as written in their own zones",
         "skip the conversion to universal time before comparing",
         "keep each timestamp in its local zone when comparing"),
    ),
    "state the unit in the answer": (
        ("state the unit in the answer", "include the unit of measure with the result",
         "write the unit next to the final number", "never give a bare number; name its unit"),
        ("give the bare number without a unit", "leave the unit of measure out of the result",
         "write only the number, no unit", "omit the unit from the final answer"),
    ),
    "treat an empty cell as missing, not zero": (
        ("treat an empty cell as missing, not zero", "a blank cell means no data rather than 0",
         "exclude empty cells instead of counting them as zero", "never read a blank as the number zero"),
        ("treat an empty cell as zero", "a blank cell means 0", "count empty cells as zero values",
         "read a blank as the number zero"),
    ),
    "sort ascending unless told otherwise": (
        ("sort ascending unless told otherwise", "order from smallest to largest by default",
         "default to increasing order", "list the lowest value first unless asked differently"),
        ("sort descending unless told otherwise", "order from largest to smallest by default",
         "default to decreasing order", "list the highest value first unless asked differently"),
    ),
    "quote paths with spaces": (
        ("quote paths with spaces", "wrap any path containing a space in quotes",
         "put quotation marks around paths that include blanks", "a path with a space must be quoted"),
        ("leave paths with spaces unquoted", "never wrap paths in quotes", "pass paths containing a space as they are",
         "a path with a space needs no quotes"),
    ),
}
"""For each action of ``combee_core.sim.task_suite._ACTIONS``: four phrasings of it, then four of its opposite."""

STRUCTURES: tuple[str, ...] = (
    "For {s}, {a}.",
    "When a task involves {s}, {a}.",
    "{A} in tasks about {s}.",
    "{S}: {a}.",
    "If the question is about {s}, {a}.",
)
"""Sentence structures: ``{s}``/``{a}`` the subject and action phrasings, ``{S}``/``{A}`` capitalised."""

HINTS: tuple[str, ...] = ("Check how you handled {s}.", "The checker flagged the part about {s}.", "Look again at {s}.")
"""What a failing check says when it names the subject but not the rule."""

GENERIC_PHRASINGS: tuple[tuple[str, tuple[str, str, str]], ...] = (
    ("tools", ("Re-read the question before answering.", "Read the task again before giving the answer.",
               "Go over the question once more before you reply.")),
    ("formatting", ("Double-check the final answer's format.", "Verify the format of the final answer.",
                    "Make sure the answer is in the requested format.")),
    ("arithmetic", ("Show intermediate steps when computing.", "Write out the intermediate steps of a calculation.",
                    "Lay out each step of the computation.")),
    ("lookup", ("Prefer the most specific source available.", "Use the most specific source you can find.",
                "Pick the narrowest available source over general ones.")),
)
"""The suite's four generic tips (section, three phrasings; the first is the suite's own)."""
