import unittest

from __tpl_module__ import mean, __tpl_median__, mode, moving_average, percentile, __tpl_variance__, __tpl_zscores__


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)
        self.assertEqual(mean([5]), 5)
        with self.assertRaises(ValueError):
            mean([])

    def test_median(self):
        self.assertEqual(__tpl_median__([3, 1, 2]), 2)
        self.assertEqual(__tpl_median__([4, 1, 3, 2]), 2.5)
        self.assertEqual(__tpl_median__([7]), 7)
        self.assertEqual(__tpl_median__([1, 9]), 5)
        with self.assertRaises(ValueError):
            __tpl_median__([])

    def test_mode(self):
        self.assertEqual(mode([1, 2, 2, 3, 3]), 2)
        self.assertEqual(mode([5, 4, 4, 5, 6]), 4)
        self.assertEqual(mode([9]), 9)

    def test_variance(self):
        data = [2, 4, 4, 4, 5, 5, 7, 9]
        self.assertEqual(__tpl_variance__(data, sample=False), 4)
        self.assertAlmostEqual(__tpl_variance__(data, sample=True), 32 / 7)
        self.assertAlmostEqual(__tpl_variance__(data), 32 / 7 if __tpl_sample__ else 4)
        with self.assertRaises(ValueError):
            __tpl_variance__([1])

    def test_percentile(self):
        data = [15, 20, 35, 40, 50]
        self.assertEqual(percentile(data, 0), 15)
        self.assertEqual(percentile(data, 30), 20)
        self.assertEqual(percentile(data, 40), 20)
        self.assertEqual(percentile(data, 50), 35)
        self.assertEqual(percentile(data, 100), 50)
        with self.assertRaises(ValueError):
            percentile(data, 101)
        with self.assertRaises(ValueError):
            percentile(data, -1)

    def test_moving_average(self):
        self.assertEqual(moving_average([1, 2, 3, 4, 5], 2), [1.5, 2.5, 3.5, 4.5])
        self.assertEqual(moving_average([1, 2, 3], 3), [2.0])
        self.assertEqual(moving_average([1, 2], 3), [])
        data = list(range(10))
        self.assertEqual(len(moving_average(data)), 11 - __tpl_window__)
        self.assertEqual(moving_average(data)[0], sum(range(__tpl_window__)) / __tpl_window__)
        with self.assertRaises(ValueError):
            moving_average(data, 0)

    def test_zscores(self):
        z = __tpl_zscores__([2, 4, 4, 4, 5, 5, 7, 9])
        self.assertEqual(z[0], -1.5)
        self.assertEqual(z[-1], 2.0)
        self.assertAlmostEqual(sum(z), 0.0)


if __name__ == "__main__":
    unittest.main()
