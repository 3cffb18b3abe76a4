"""Calendar arithmetic on (year, month, day) tuples, without the datetime module.

Ordinals count days from 0001-01-01 (ordinal 1), as in the proleptic Gregorian calendar."""

DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
WEEK_STARTS_ON = __tpl_weekstart__
"""0 when weeks start on Monday, 6 when on Sunday."""


def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if not 1 <= month <= 12:
        raise ValueError("bad month")
    if month == 2 and is_leap(year):
        return 29
    return DAYS_IN_MONTH[month - 1]


def __tpl_day_of_year__(year, month, day):
    if day < 1 or day > days_in_month(year, month):
        raise ValueError("bad day")
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def to_ordinal(year, month, day):
    y = year - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + __tpl_day_of_year__(year, month, day)


def from_ordinal(n):
    if n < 1:
        raise ValueError("ordinal must be positive")
    year = (n - 1) // 366 + 1
    while to_ordinal(year + 1, 1, 1) <= n:
        year += 1
    remaining = n - to_ordinal(year, 1, 1) + 1
    month = 1
    while remaining > days_in_month(year, month):
        remaining -= days_in_month(year, month)
        month += 1
    return (year, month, remaining)


def __tpl_add_days__(date, days):
    return from_ordinal(to_ordinal(*date) + days)


def days_between(start, end):
    return to_ordinal(*end) - to_ordinal(*start)


def weekday(date):
    """Day of the week, 0 for the first day of the week."""
    return (to_ordinal(*date) - 1 - WEEK_STARTS_ON) % 7


def month_end(date, months=__tpl_months__):
    """The last day of the month ``months`` after ``date``'s."""
    year, month, _ = date
    index = year * 12 + (month - 1) + months
    year, month = divmod(index, 12)
    return (year, month + 1, days_in_month(year, month + 1))
