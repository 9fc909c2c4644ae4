/** How wide text is drawn in the page's font: the flow graph sizes its boxes and gaps by it before it draws them. */

let context: CanvasRenderingContext2D | null | undefined;
let family = '';

/**
 * The width in CSS pixels of `text` in `font` (CSS shorthand without the family, e.g. `600 13px`) and the page's
 * font family, measured on a canvas; an estimate where no canvas is at hand.
 */
export function textWidth(text: string, font: string): number {
  if (context === undefined) {
    context = document.createElement('canvas').getContext('2d');
    family = getComputedStyle(document.documentElement).fontFamily;
  }
  if (!context) return text.length * 0.62 * Number(/(\d+)px/.exec(font)?.[1] ?? 12);
  context.font = `${font} ${family}`;
  return context.measureText(text).width;
}

/** `text` cut to at most `max` pixels, ending in `…` when it had to be cut. */
export function fitText(text: string, font: string, max: number): string {
  if (textWidth(text, font) <= max) return text;
  let end = text.length;
  while (end > 1 && textWidth(`${text.slice(0, end)}…`, font) > max) end -= 1;
  return `${text.slice(0, end)}…`;
}
