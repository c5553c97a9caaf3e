// Values to canonicalize, shared by the tests that compare inputHash with the server's
// idem_hash and with the Python package's input_hash.

/** The Python package's own list (python/tests/frameworks/test_agent_keys.py), as
 * JavaScript values, and a few of JavaScript's own: integer-like member names, which an
 * object enumerates first. */
export const HANDPICKED: readonly unknown[] = [
  { b: 2, a: 1 },
  { z: { y: [3, { x: null, w: true }], v: false }, "\u00e9": "caf\u00e9" },
  // Non-ASCII: accents, CJK, an emoji (a surrogate pair in UTF-16), right-to-left text.
  { name: "J\u00fcrgen \u6771\u4eac \u{1f600} \u05e9\u05dc\u05d5\u05dd", to: "a@b" },
  // UTF-16 order: U+E000 sorts after U+1F600 (0xD83D), unlike code-point order.
  { "\ue000": 1, "\u{1f600}": 2, a: 3, "\u00ff": 4, "\u0100": 5, A: 6, "": 7 },
  // Escapes: quotes, backslash, controls as lowercase \u00xx, DEL and '/' raw.
  { s: "q\"b\\n\n\r\t\b\f\x01\x1f\x7f/</script>" },
  // Numbers: doubles' shortest forms, ECMAScript's exponent thresholds. (Integers beyond
  // 2^53 are the doubles nearest to them, as JSON.parse reads them.)
  {
    n: [
      0, -0, 1, -1, 1.0, 0.1, 0.5, -2.5, 100, 1e20, 1e21, 1.5e21, 1e-6, 1e-7, 1.5e-7,
      123456789.125, Number("9007199254740993"), Number("-9007199254740993"),
      Number("123456789012345678901234567890"), 5e-324, 1.7976931348623157e308,
      333333333.3333333, 2 ** 64, 1e23, 0.000001234,
    ],
  },
  [],
  {},
  [[[]], { a: [] }],
  "just a string",
  12,
  true,
  null,
  // Integer-like names come first in an object's own order: "9" before "10" and "a".
  { a: 1, "10": 2, "9": 3, "1": 4, "-1": 5, "01": 6 },
  { to: "\u00e9l\u00e8ve@example.com", subject: "\u00bfQu\u00e9 tal? \u{1f600}", cc: ["b@x", "a@x"] },
];

/** Values that only JavaScript has, read as JSON.stringify reads them. (A Set, and
 * undefined as the whole value, are not: canonical.test.ts.) */
export function javascriptOnly(): unknown[] {
  class Point {
    constructor(
      readonly x: number,
      readonly y: number,
    ) {}
    get norm(): number {
      return Math.hypot(this.x, this.y); // on the prototype: not a member
    }
  }
  return [
    { when: new Date(Date.UTC(2026, 11, 5, 19, 40, 0, 123)), id: 1 },
    { kept: 1, gone: undefined },
    [undefined, 2],
    new Point(3, 4),
    { n: new Number(1.5), s: new String("boxed"), b: new Boolean(false) },
    { money: { toJSON: (key: string) => `${key}:EUR 12.50` } },
    { [Symbol("hidden")]: 1, shown: 2 },
    Object.assign(Object.create(null) as object, { b: 1, a: 2 }),
    new Uint8Array([3, 1, 2]),
    { sparse: [1, , 3] }, // eslint-disable-line no-sparse-arrays
  ];
}

/** `count` documents from the seed: nested objects and arrays of random doubles,
 * integers, decimals and strings drawn from every plane (no U+0000, no lone surrogate). */
export function generated(seed: number, count: number): unknown[] {
  const random = mulberry32(seed);
  const below = (n: number): number => Math.floor(random() * n);
  const bits = new DataView(new ArrayBuffer(8));

  function double(): number {
    for (;;) {
      bits.setUint32(0, below(2 ** 32));
      bits.setUint32(4, below(2 ** 32));
      const x = bits.getFloat64(0);
      if (Number.isFinite(x)) return x;
    }
  }
  function num(): number {
    switch (below(6)) {
      case 0:
        return double();
      case 1:
        return below(2001) - 1000;
      case 2:
        return (below(2_000_001) - 1_000_000) / 10 ** below(8);
      case 3:
        return (random() + 1) * 2 ** (53 + below(20)); // integers beyond 2^53
      case 4:
        return (below(9) + 1) * 10 ** (below(50) - 25); // around the exponent thresholds
      default:
        return random() * 10 ** (below(600) - 300);
    }
  }
  const PLANES: readonly (readonly [number, number])[] = [
    [0x20, 0x7f], // ASCII, DEL included
    [0x01, 0x1f], // controls (escaped)
    [0x80, 0xff],
    [0x100, 0xd7ff],
    [0xe000, 0xffff], // after the surrogates: sorts after every astral character
    [0x10000, 0x10ffff], // astral: a surrogate pair
  ];
  function text(maxLength: number): string {
    let s = "";
    for (let n = below(maxLength + 1); n > 0; n--) {
      const [low, high] = PLANES[below(PLANES.length)] ?? [0x61, 0x7a];
      s += String.fromCodePoint(low + below(high - low + 1));
    }
    return s;
  }
  function value(depth: number): unknown {
    switch (below(depth < 4 ? 8 : 5)) {
      case 0:
      case 1:
        return num();
      case 2:
        return text(12);
      case 3:
        return below(3) === 0 ? null : below(2) === 0;
      case 4:
        return ["send_email", "a", "10", "", "\u00e9"][below(5)];
      case 5:
      case 6: {
        const o: Record<string, unknown> = {};
        for (let n = below(6); n > 0; n--) o[text(4)] = value(depth + 1);
        return o;
      }
      default:
        return Array.from({ length: below(5) }, () => value(depth + 1));
    }
  }
  return Array.from({ length: count }, () => value(0));
}

// A small, well-known 32-bit generator: the same documents for a seed on every machine.
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
