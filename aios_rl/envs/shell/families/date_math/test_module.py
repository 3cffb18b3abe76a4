import datetime
import unittest

from __tpl_module__ import (
    WEEK_STARTS_ON,
    __tpl_add_days__,
    __tpl_day_of_year__,
    days_between,
    days_in_month,
    from_ordinal,
    is_leap,
    month_end,
    to_ordinal,
    weekday,
)

SAMPLES = [(1, 1, 1), (1999, 12, 31), (2000, 2, 29), (2023, 3, 1), (2024, 12, 31), (1900, 3, 1)]


class DatesTest(unittest.TestCase):
    def test_leap_years(self):
        self.assertTrue(is_leap(2024))
        self.assertTrue(is_leap(2000))
        self.assertFalse(is_leap(1900))
        self.assertFalse(is_leap(2023))
        self.assertTrue(is_leap(4))

    def test_days_in_month(self):
        self.assertEqual(days_in_month(2023, 1), 31)
        self.assertEqual(days_in_month(2023, 2), 28)
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertEqual(days_in_month(2023, 4), 30)
        self.assertEqual(days_in_month(2023, 12), 31)
        for bad in (0, 13):
            with self.assertRaises(ValueError):
                days_in_month(2023, bad)

    def test_day_of_year(self):
        self.assertEqual(__tpl_day_of_year__(2023, 1, 1), 1)
        self.assertEqual(__tpl_day_of_year__(2023, 3, 1), 60)
        self.assertEqual(__tpl_day_of_year__(2024, 3, 1), 61)
        self.assertEqual(__tpl_day_of_year__(2024, 12, 31), 366)
        with self.assertRaises(ValueError):
            __tpl_day_of_year__(2023, 2, 29)
        with self.assertRaises(ValueError):
            __tpl_day_of_year__(2023, 1, 0)

    def test_ordinals_match_datetime(self):
        for date in SAMPLES:
            self.assertEqual(to_ordinal(*date), datetime.date(*date).toordinal(), date)
            self.assertEqual(from_ordinal(to_ordinal(*date)), date)
        with self.assertRaises(ValueError):
            from_ordinal(0)

    def test_from_ordinal_everywhere_in_a_leap_year(self):
        start = datetime.date(2024, 1, 1).toordinal()
        for n in range(start - 2, start + 368, 13):
            d = datetime.date.fromordinal(n)
            self.assertEqual(from_ordinal(n), (d.year, d.month, d.day))

    def test_add_days(self):
        self.assertEqual(__tpl_add_days__((2024, 2, 28), 1), (2024, 2, 29))
        self.assertEqual(__tpl_add_days__((2023, 2, 28), 1), (2023, 3, 1))
        self.assertEqual(__tpl_add_days__((2023, 12, 31), 1), (2024, 1, 1))
        self.assertEqual(__tpl_add_days__((2024, 1, 1), -1), (2023, 12, 31))
        self.assertEqual(__tpl_add_days__((2020, 5, 17), 1000), (2023, 2, 11))

    def test_days_between(self):
        self.assertEqual(days_between((2024, 1, 1), (2024, 3, 1)), 60)
        self.assertEqual(days_between((2024, 3, 1), (2024, 1, 1)), -60)
        self.assertEqual(days_between((2023, 5, 5), (2023, 5, 5)), 0)

    def test_weekday(self):
        self.assertEqual(WEEK_STARTS_ON, __tpl_weekstart__)
        for date in SAMPLES:
            expected = (datetime.date(*date).weekday() - WEEK_STARTS_ON) % 7
            self.assertEqual(weekday(date), expected, date)

    def test_month_end(self):
        self.assertEqual(month_end((2024, 1, 15), 1), (2024, 2, 29))
        self.assertEqual(month_end((2023, 11, 2), 2), (2024, 1, 31))
        self.assertEqual(month_end((2023, 3, 9), 0), (2023, 3, 31))
        self.assertEqual(month_end((2023, 3, 9), -3), (2022, 12, 31))
        y, m = divmod(2023 * 12 + 5 + __tpl_months__, 12)
        self.assertEqual(month_end((2023, 6, 1)), (y, m + 1, days_in_month(y, m + 1)))


if __name__ == "__main__":
    unittest.main()
