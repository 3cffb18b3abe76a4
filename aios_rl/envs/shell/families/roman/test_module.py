import unittest

from __tpl_module__ import MAX_VALUE, add_roman, __tpl_from_roman__, is_roman, __tpl_to_roman__

KNOWN = {
    1: "I", 3: "III", 4: "IV", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD",
    1994: "MCMXCIV", 2024: "MMXXIV", 3888: "MMMDCCCLXXXVIII", 444: "CDXLIV", 949: "CMXLIX",
}


class RomanTest(unittest.TestCase):
    def test_to_roman(self):
        for n, text in KNOWN.items():
            self.assertEqual(__tpl_to_roman__(n, lower=False), text, n)

    def test_lower(self):
        self.assertEqual(__tpl_to_roman__(14, lower=True), "xiv")
        self.assertEqual(__tpl_to_roman__(6), "vi" if __tpl_lower__ else "VI")

    def test_range(self):
        self.assertEqual(MAX_VALUE, __tpl_maxvalue__)
        self.assertEqual(__tpl_from_roman__(__tpl_to_roman__(MAX_VALUE)), MAX_VALUE)
        self.assertEqual(__tpl_to_roman__(3000, lower=False), "MMM")
        for bad in (0, -1, MAX_VALUE + 1, 2.0, "5"):
            with self.assertRaises(ValueError):
                __tpl_to_roman__(bad)

    def test_from_roman(self):
        for n, text in KNOWN.items():
            self.assertEqual(__tpl_from_roman__(text), n, text)
        self.assertEqual(__tpl_from_roman__("mcmxciv"), 1994)

    def test_from_roman_rejects(self):
        for bad in ("", "IIII", "VX", "IC", "ABC", "MMMM", "IIV", "XM"):
            with self.assertRaises(ValueError, msg=bad):
                __tpl_from_roman__(bad)

    def test_round_trip(self):
        for n in range(1, MAX_VALUE + 1, 7):
            self.assertEqual(__tpl_from_roman__(__tpl_to_roman__(n, lower=False)), n)

    def test_is_roman(self):
        self.assertTrue(is_roman("XLII"))
        self.assertFalse(is_roman("XLIIII"))
        self.assertFalse(is_roman(""))

    def test_add(self):
        self.assertEqual(add_roman("IX", "VI").upper(), "XV")
        self.assertEqual(add_roman("MM", "CD").upper(), "MMCD")


if __name__ == "__main__":
    unittest.main()
