/**
 * Reads the text of ClickHouse's `EXPLAIN AST` into a tree. The format is one node per
 * line, indented by one space per level: `<Type>[ <details>][ (children N)]`.
 *
 * Identifiers are printed raw, so a back-quoted name containing a newline could try to
 * forge lines. The reader fails closed: every line must look like a node, a node may only
 * go one level deeper than the line before, there is exactly one root, and every
 * `(children N)` must match the lines found under it. Anything else is refused as
 * unreadable. (Forged lines can only add nodes, never hide one; the guard checks every
 * node it sees, and the engine-side defences in src/analytics/README below still hold.)
 */
export interface AstNode {
  type: string;
  /** The rest of the line after the type, without the trailing `(children N)`. */
  details: string;
  children: AstNode[];
}

export class AstFormatError extends Error {
  override name = 'AstFormatError';
}

const CHILDREN = / \(children (\d+)\)$/;
const LINE = /^( *)([A-Za-z][A-Za-z0-9_]*(?:::[A-Za-z][A-Za-z0-9_]*)?)(?: (.*))?$/;

export function parseExplainAst(text: string): AstNode {
  const lines = text.split('\n');
  while (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  if (lines.length === 0) throw new AstFormatError('empty syntax tree');
  const stack: { node: AstNode; expected: number | null }[] = [];
  let root: AstNode | null = null;
  const close = (entry: { node: AstNode; expected: number | null }): void => {
    const n = entry.node.children.length;
    if ((entry.expected ?? 0) !== n) throw new AstFormatError(`node ${entry.node.type} announces ${entry.expected ?? 0} children and has ${n}`);
  };
  for (const raw of lines) {
    const c = CHILDREN.exec(raw);
    const line = c ? raw.slice(0, c.index) : raw;
    const m = LINE.exec(line);
    if (!m) throw new AstFormatError('unreadable syntax tree line');
    const depth = m[1]!.length;
    if (depth > stack.length) throw new AstFormatError('syntax tree line skips a level');
    while (stack.length > depth) close(stack.pop()!);
    const node: AstNode = { type: m[2]!, details: m[3] ?? '', children: [] };
    if (depth === 0) {
      if (root) throw new AstFormatError('more than one root');
      root = node;
    } else {
      stack[depth - 1]!.node.children.push(node);
    }
    stack.push({ node, expected: c ? Number(c[1]) : null });
  }
  while (stack.length > 0) close(stack.pop()!);
  return root!;
}

/** Every node of the tree, depth first, with its parent. */
export function* walk(node: AstNode, parent: AstNode | null = null): Generator<{ node: AstNode; parent: AstNode | null }> {
  yield { node, parent };
  for (const c of node.children) yield* walk(c, node);
}

/** The name printed after a TableIdentifier/Function/Identifier type, without ` (alias …)`. */
export function nodeName(n: AstNode): string {
  const i = n.details.indexOf(' (alias ');
  return i === -1 ? n.details : n.details.slice(0, i);
}
