import unittest

from __tpl_module__ import MAX_RUN, __tpl_decode__, __tpl_encode__, longest_run, ratio, runs


class RunLengthTest(unittest.TestCase):
    def test_encode(self):
        self.assertEqual(__tpl_encode__("aaab"), "3a1b")
        self.assertEqual(__tpl_encode__("abc"), "1a1b1c")
        self.assertEqual(__tpl_encode__("a"), "1a")
        self.assertEqual(__tpl_encode__(""), "")
        self.assertEqual(__tpl_encode__("aabbbaa"), "2a3b2a")

    def test_encode_splits_long_runs(self):
        self.assertEqual(MAX_RUN, __tpl_maxrun__)
        self.assertEqual(__tpl_encode__("z" * MAX_RUN), str(MAX_RUN) + "z")
        self.assertEqual(__tpl_encode__("z" * (MAX_RUN + 2)), str(MAX_RUN) + "z2z")

    def test_decode(self):
        self.assertEqual(__tpl_decode__("3a1b"), "aaab")
        self.assertEqual(__tpl_decode__("12x"), "x" * 12)
        self.assertEqual(__tpl_decode__(""), "")
        self.assertEqual(__tpl_decode__("0a2b"), "bb")

    def test_decode_errors(self):
        with self.assertRaises(ValueError):
            __tpl_decode__("a")
        with self.assertRaises(ValueError):
            __tpl_decode__("2a3")
        with self.assertRaises(ValueError):
            __tpl_decode__("2ab")

    def test_round_trip(self):
        for text in ["", "a", "hello", "aaaaabbbbbcccccd", "zz" * 30, "x" * (3 * MAX_RUN + 1)]:
            self.assertEqual(__tpl_decode__(__tpl_encode__(text)), text)

    def test_runs(self):
        self.assertEqual(runs("aabccc"), [("a", 2), ("b", 1), ("c", 3)])
        self.assertEqual(runs(""), [])
        self.assertEqual(runs("x" * 40), [("x", 40)])

    def test_longest_run(self):
        self.assertEqual(longest_run("abbcccbb"), ("c", 3))
        self.assertEqual(longest_run("aabb"), ("a", 2))
        self.assertEqual(longest_run(""), ("", 0))

    def test_ratio(self):
        self.assertEqual(ratio(""), 1.0)
        self.assertEqual(ratio("aaaa"), 0.5)
        self.assertEqual(ratio("ab"), 2.0)


if __name__ == "__main__":
    unittest.main()
