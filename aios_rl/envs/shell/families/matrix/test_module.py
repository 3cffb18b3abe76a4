import unittest

from __tpl_module__ import add, __tpl_det__, identity, __tpl_multiply__, __tpl_power__, scale, shape, trace, transpose, zeros

A = [[1, 2, 3], [4, 5, 6]]
B = [[7, 8], [9, 10], [11, 12]]


class MatrixTest(unittest.TestCase):
    def test_zeros_and_identity(self):
        self.assertEqual(zeros(2, 3), [[0, 0, 0], [0, 0, 0]])
        self.assertEqual(identity(3), [[1, 0, 0], [0, 1, 0], [0, 0, 1]])
        m = zeros(2, 2)
        m[0][0] = 5
        self.assertEqual(m[1][0], 0)

    def test_shape(self):
        self.assertEqual(shape(A), (2, 3))
        self.assertEqual(shape(B), (3, 2))
        self.assertEqual(shape([]), (0, 0))

    def test_transpose(self):
        self.assertEqual(transpose(A), [[1, 4], [2, 5], [3, 6]])
        self.assertEqual(transpose(transpose(B)), B)

    def test_add(self):
        self.assertEqual(add(A, A), [[2, 4, 6], [8, 10, 12]])
        self.assertEqual(add([[1, 2]], [[10, 20]]), [[11, 22]])
        with self.assertRaises(ValueError):
            add(A, B)

    def test_multiply(self):
        self.assertEqual(__tpl_multiply__(A, B), [[58, 64], [139, 154]])
        self.assertEqual(__tpl_multiply__(B, A), [[39, 54, 69], [49, 68, 87], [59, 82, 105]])
        self.assertEqual(__tpl_multiply__(identity(2), [[1, 2], [3, 4]]), [[1, 2], [3, 4]])
        with self.assertRaises(ValueError):
            __tpl_multiply__(A, A)

    def test_scale(self):
        self.assertEqual(scale([[1, -2]], 3), [[3, -6]])
        self.assertEqual(scale([[1, 2]]), [[__tpl_factor__, 2 * __tpl_factor__]])

    def test_trace(self):
        self.assertEqual(trace([[1, 2], [3, 4]]), 5)
        self.assertEqual(trace(identity(4)), 4)
        with self.assertRaises(ValueError):
            trace(A)

    def test_power(self):
        m = [[1, 1], [1, 0]]
        self.assertEqual(__tpl_power__(m, 0), identity(2))
        self.assertEqual(__tpl_power__(m, 1), m)
        self.assertEqual(__tpl_power__(m, 5), [[8, 5], [5, 3]])
        with self.assertRaises(ValueError):
            __tpl_power__(m, -1)

    def test_determinant(self):
        self.assertEqual(__tpl_det__([[7]]), 7)
        self.assertEqual(__tpl_det__([[1, 2], [3, 4]]), -2)
        self.assertEqual(__tpl_det__([[2, 0, 1], [1, 3, 2], [1, 1, 2]]), 6)
        self.assertEqual(__tpl_det__([[6, 1, 1], [4, -2, 5], [2, 8, 7]]), -306)
        self.assertEqual(__tpl_det__([[1, 2, 3, 4], [5, 6, 7, 8], [2, 6, 4, 8], [3, 1, 1, 2]]), 72)
        with self.assertRaises(ValueError):
            __tpl_det__(A)


if __name__ == "__main__":
    unittest.main()
