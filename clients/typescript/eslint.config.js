// ESLint (flat config): typescript-eslint's strict type-checked rules over the sources and
// the tests, each file checked with the tsconfig that compiles it (tsconfig.json for src/,
// tsconfig.test.json for test/). A rule switched off for one line says why, beside it.

import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'dist-test/', 'node_modules/'] },
  js.configs.recommended,
  tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        project: ['./tsconfig.json', './tsconfig.test.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      // node:test's test() and describe() return promises the runner itself awaits.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] }] },
      ],
      // Numbers print as expected in messages; strings, numbers only (no objects, no nullish).
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      // `() => release(slot)` for a void callback reads as intended.
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
    },
  },
  {
    files: ['eslint.config.js'],
    extends: [tseslint.configs.disableTypeChecked],
  },
);
