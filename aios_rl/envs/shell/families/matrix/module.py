"""Matrices as lists of rows."""


def zeros(rows, cols):
    return [[0] * cols for _ in range(rows)]


def identity(n):
    m = zeros(n, n)
    for i in range(n):
        m[i][i] = 1
    return m


def shape(m):
    return (len(m), len(m[0]) if m else 0)


def transpose(m):
    rows, cols = shape(m)
    return [[m[r][c] for r in range(rows)] for c in range(cols)]


def add(a, b):
    if shape(a) != shape(b):
        raise ValueError("shape mismatch")
    return [[a[i][j] + b[i][j] for j in range(len(a[0]))] for i in range(len(a))]


def __tpl_multiply__(a, b):
    ra, ca = shape(a)
    rb, cb = shape(b)
    if ca != rb:
        raise ValueError("shape mismatch")
    out = zeros(ra, cb)
    for i in range(ra):
        for j in range(cb):
            total = 0
            for k in range(ca):
                total += a[i][k] * b[k][j]
            out[i][j] = total
    return out


def scale(m, factor=__tpl_factor__):
    return [[x * factor for x in row] for row in m]


def trace(m):
    rows, cols = shape(m)
    if rows != cols:
        raise ValueError("not square")
    return sum(m[i][i] for i in range(rows))


def __tpl_power__(m, n):
    if n < 0:
        raise ValueError("negative power")
    result = identity(len(m))
    for _ in range(n):
        result = __tpl_multiply__(result, m)
    return result


def __tpl_det__(m):
    n, cols = shape(m)
    if n != cols:
        raise ValueError("not square")
    if n == 1:
        return m[0][0]
    if n == 2:
        return m[0][0] * m[1][1] - m[0][1] * m[1][0]
    total = 0
    for c in range(n):
        minor = [row[:c] + row[c + 1 :] for row in m[1:]]
        sign = 1 if c % 2 == 0 else -1
        total += sign * m[0][c] * __tpl_det__(minor)
    return total
