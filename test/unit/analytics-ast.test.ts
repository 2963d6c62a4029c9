/**
 * Reading EXPLAIN AST output (src/analytics/ast.ts): well-formed trees, and refusal of
 * everything a forged identifier could print (extra roots, skipped levels, wrong counts).
 */
import t from 'tap';
import { nodeName, parseExplainAst, walk } from '../../src/analytics/ast.js';

const GOOD = [
  'SelectWithUnionQuery (children 1)',
  ' ExpressionList (children 1)',
  '  SelectQuery (children 2)',
  '   ExpressionList (children 1)',
  '    Function count (alias c) (children 1)',
  '     ExpressionList',
  '   TablesInSelectQuery (children 1)',
  '    TablesInSelectQueryElement (children 1)',
  '     TableExpression (children 1)',
  '      TableIdentifier fact_signal (alias f)',
  '',
].join('\n');

t.test('a well-formed tree', async (t) => {
  const root = parseExplainAst(GOOD);
  t.equal(root.type, 'SelectWithUnionQuery');
  const nodes = [...walk(root)].map(({ node }) => node);
  t.equal(nodes.length, 10);
  const fn = nodes.find((n) => n.type === 'Function')!;
  t.equal(nodeName(fn), 'count');
  t.equal(fn.children.length, 1);
  const table = nodes.find((n) => n.type === 'TableIdentifier')!;
  t.equal(nodeName(table), 'fact_signal');
  t.equal(table.details, 'fact_signal (alias f)');
  const parentOfTable = [...walk(root)].find(({ node }) => node === table)!.parent!;
  t.equal(parentOfTable.type, 'TableExpression');
});

t.test('type names with ::', async (t) => {
  const root = parseExplainAst('ColumnsReplaceTransformer (children 1)\n ColumnsReplaceTransformer::Replacement (children 1)\n  Literal UInt64_1\n');
  t.equal(root.children[0]!.type, 'ColumnsReplaceTransformer::Replacement');
});

t.test('forged or malformed output is refused', async (t) => {
  const bad: [string, string][] = [
    ['', 'empty'],
    ['SelectWithUnionQuery\nTableIdentifier fact_signal\n', 'a second root'],
    ['SelectWithUnionQuery (children 1)\n   ExpressionList\n', 'a skipped level'],
    ['SelectWithUnionQuery (children 2)\n ExpressionList\n', 'fewer children than announced'],
    ['SelectWithUnionQuery (children 1)\n ExpressionList\n Identifier x\n', 'more children than announced'],
    ['SelectWithUnionQuery\n ExpressionList\n', 'children under a leaf'],
    ['SelectWithUnionQuery (children 1)\n\tExpressionList\n', 'a tab'],
    ['SelectWithUnionQuery (children 1)\n ) x\n', 'a line that is not a node'],
    ['SelectWithUnionQuery (children 1)\n  \n', 'an empty line inside'],
  ];
  for (const [text, why] of bad) t.throws(() => parseExplainAst(text), { name: 'AstFormatError' }, why);
});
