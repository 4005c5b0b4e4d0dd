// The API report (api-report.md): for each entry point of package.json "exports", the
// names it exports; then every declaration those names stand for, as dist/*.d.ts declares
// it (comments left out, `@deprecated` kept), and the declarations of ours they reach
// without exporting them (a base class, a type in a signature), whose shape is part of the
// API too. test/exports.test.ts fails when the file is stale; `npm run api-report` rewrites
// it after an intended change, so that a change of the public surface shows in the diff.
//
// Built on the TypeScript compiler API (the `typescript` the package builds with) rather
// than @microsoft/api-extractor, which reports one entry point per run and wants release
// tags on every declaration.

import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';

/** The package root, from test/ and from dist-test/ alike. */
const ROOT = new URL('../', import.meta.url);
export const REPORT_FILE = fileURLToPath(new URL('api-report.md', ROOT));

interface PackageJson {
  name: string;
  exports: Record<string, { types: string; default: string }>;
}

export interface EntryPoint {
  /** As a user imports it, e.g. `@mcp-connect/client/server`. */
  specifier: string;
  /** Exported names that exist at run time (classes, functions, constants). */
  values: string[];
  /** Exported names that are types only. */
  types: string[];
}

export interface Report {
  text: string;
  entryPoints: EntryPoint[];
}

const KINDS: Partial<Record<ts.SyntaxKind, string>> = {
  [ts.SyntaxKind.ClassDeclaration]: 'class',
  [ts.SyntaxKind.InterfaceDeclaration]: 'interface',
  [ts.SyntaxKind.TypeAliasDeclaration]: 'type',
  [ts.SyntaxKind.FunctionDeclaration]: 'function',
  [ts.SyntaxKind.VariableStatement]: 'const',
  [ts.SyntaxKind.EnumDeclaration]: 'enum',
};

/** The module-level statement that declares `decl`, if it is one. */
function statementOf(decl: ts.Node): ts.Statement | undefined {
  if (ts.isVariableDeclaration(decl)) {
    const statement = decl.parent.parent;
    return ts.isVariableStatement(statement) && ts.isSourceFile(statement.parent) ? statement : undefined;
  }
  return KINDS[decl.kind] !== undefined && ts.isSourceFile(decl.parent) ? (decl as ts.Statement) : undefined;
}

function isTypeOnly(symbol: ts.Symbol): boolean {
  return (symbol.declarations ?? []).some((d) => ts.isTypeOnlyImportOrExportDeclaration(d));
}

export function apiReport(): Report {
  const pkg = JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as PackageJson;
  const dist = fileURLToPath(new URL('dist/', ROOT)).replaceAll('\\', '/');
  const entries = Object.entries(pkg.exports).map(([subpath, target]) => ({
    specifier: subpath === '.' ? pkg.name : `${pkg.name}${subpath.slice(1)}`,
    file: fileURLToPath(new URL(target.types, ROOT)).replaceAll('\\', '/'),
  }));
  const program = ts.createProgram(
    entries.map((e) => e.file),
    {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      types: ['node'],
      strict: true,
      skipLibCheck: true,
      noEmit: true,
    },
  );
  const checker = program.getTypeChecker();
  const ours = (node: ts.Node) => node.getSourceFile().fileName.startsWith(dist);
  const resolve = (symbol: ts.Symbol) => ((symbol.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(symbol) : symbol);

  /** Each statement of ours in the report, with the entry-point names that export it. */
  const shown = new Map<ts.Statement, Set<string>>();
  const entryPoints: EntryPoint[] = [];
  const listing: string[] = [];
  for (const entry of entries) {
    const source = program.getSourceFile(entry.file);
    const module = source === undefined ? undefined : checker.getSymbolAtLocation(source);
    if (module === undefined) throw new Error(`${entry.file} is missing: build first (npm run build)`);
    const point: EntryPoint = { specifier: entry.specifier, values: [], types: [] };
    listing.push(`## \`${entry.specifier}\``, '');
    for (const symbol of checker.getExportsOfModule(module).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
      const target = resolve(symbol);
      const value = (target.flags & ts.SymbolFlags.Value) !== 0 && !isTypeOnly(symbol);
      (value ? point.values : point.types).push(symbol.name);
      const statements = (target.declarations ?? []).map(statementOf).filter((s) => s !== undefined);
      const kinds = statements.map((s) => KINDS[s.kind]).join(', ');
      const where = [...new Set(statements.map((s) => s.getSourceFile().fileName.slice(dist.length)))].join(', ');
      const deprecated = (target.declarations ?? []).some((d) => ts.getJSDocDeprecatedTag(d) !== undefined);
      const renamed = target.name === symbol.name ? '' : ` (declared as \`${target.name}\`)`;
      listing.push(`- ${value ? 'value' : 'type'} \`${symbol.name}\`: ${kinds} in ${where}${renamed}${deprecated ? ', deprecated' : ''}`);
      for (const s of statements) {
        if (!ours(s)) continue;
        const by = shown.get(s) ?? new Set<string>();
        by.add(`${entry.specifier}:${symbol.name}`);
        shown.set(s, by);
      }
    }
    listing.push('');
    entryPoints.push(point);
  }

  // What the exported declarations reach of ours without exporting it, transitively.
  const reached = new Set<ts.Statement>();
  const queue = [...shown.keys()];
  for (let statement = queue.shift(); statement !== undefined; statement = queue.shift()) {
    const visit = (node: ts.Node): void => {
      if (ts.isIdentifier(node)) {
        const symbol = checker.getSymbolAtLocation(node);
        for (const decl of symbol === undefined ? [] : (resolve(symbol).declarations ?? [])) {
          const s = statementOf(decl);
          if (s !== undefined && ours(s) && !shown.has(s) && !reached.has(s)) {
            reached.add(s);
            queue.push(s);
          }
        }
      }
      ts.forEachChild(node, visit);
    };
    ts.forEachChild(statement, visit);
  }

  const printer = ts.createPrinter({ removeComments: true, newLine: ts.NewLineKind.LineFeed });
  const byFile = new Map<string, ts.Statement[]>();
  for (const s of [...shown.keys(), ...reached]) {
    const file = s.getSourceFile().fileName.slice(dist.length);
    byFile.set(file, [...(byFile.get(file) ?? []), s]);
  }
  const declarations: string[] = [];
  for (const file of [...byFile.keys()].sort()) {
    const statements = (byFile.get(file) ?? []).sort((a, b) => a.pos - b.pos);
    declarations.push(`### ${file}`, '', '```ts');
    for (const s of statements) {
      const deprecated = ts.isVariableStatement(s) ? s.declarationList.declarations.some((d) => ts.getJSDocDeprecatedTag(d)) : ts.getJSDocDeprecatedTag(s);
      if (reached.has(s)) declarations.push('// not exported by an entry point; reached from the exported declarations');
      if (deprecated) declarations.push('/** @deprecated */');
      declarations.push(printer.printNode(ts.EmitHint.Unspecified, s, s.getSourceFile()));
    }
    declarations.push('```', '');
  }

  const text = [
    `# API report: ${pkg.name}`,
    '',
    '<!-- Generated by `npm run api-report` (test/apiReport.ts) from dist/*.d.ts. Do not edit:',
    '     test/exports.test.ts fails when this file is stale. A change here is a change of the',
    '     public API; review it as one. -->',
    '',
    ...listing,
    '## Declarations',
    '',
    ...declarations,
  ].join('\n');
  return { text, entryPoints };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  writeFileSync(REPORT_FILE, apiReport().text);
  console.log(`wrote ${REPORT_FILE}`);
}
