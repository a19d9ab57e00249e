// Money stays exact: the API sends decimal strings, and sums of them are added as scaled integers, never as floats.

/** A decimal's digits as an integer and how many of them are decimals ("1.25" is 125 and 2; "1E-7" is 1 and 7). */
function parts(text: string): [bigint, number] {
  const [mantissa = "0", exponent = "0"] = text.toUpperCase().split("E");
  const negative = mantissa.startsWith("-");
  const [whole = "0", fraction = ""] = (negative ? mantissa.slice(1) : mantissa).split(".");
  let scaled = BigInt(`${whole}${fraction}` || "0");
  let scale = fraction.length - Number(exponent);
  if (scale < 0) {
    scaled *= 10n ** BigInt(-scale);
    scale = 0;
  }
  return [negative ? -scaled : scaled, scale];
}

/** a + b, exactly, with no more decimals than the longer of the two (and at least two). */
export function add(a: string, b: string): string {
  const [x, xs] = parts(a);
  const [y, ys] = parts(b);
  const scale = Math.max(xs, ys, 2);
  const sum = x * 10n ** BigInt(scale - xs) + y * 10n ** BigInt(scale - ys);
  const digits = (sum < 0n ? -sum : sum).toString().padStart(scale + 1, "0");
  const text = `${digits.slice(0, -scale)}.${digits.slice(-scale)}`;
  return `${sum < 0n ? "-" : ""}${text.replace(/(\.\d\d\d*?)0+$/, "$1")}`;
}

export function sum(values: string[]): string {
  return values.reduce(add, "0");
}
