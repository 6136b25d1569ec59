// Builds the dashboard into dist/ (index.html and content-hashed assets
// under ui/) and copies it to ../internal/web/dist/app, where the Go binary
// embeds it from. Run with `npm run build` (or `make web`).
import * as esbuild from 'esbuild';
import { cp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const out = path.join(here, 'dist');
const embed = path.join(here, '..', 'internal', 'web', 'dist', 'app');

const novncVersion = JSON.parse(await readFile(path.join(here, 'node_modules', '@novnc', 'novnc', 'package.json'), 'utf8')).version;

await rm(out, { recursive: true, force: true });
const result = await esbuild.build({
  entryPoints: { app: path.join(here, 'src', 'main.js'), style: path.join(here, 'src', 'style.css') },
  bundle: true,
  format: 'esm', // noVNC's core uses top-level await
  target: 'es2022',
  minify: true,
  sourcemap: false,
  legalComments: 'eof',
  banner: { js: `/*! hvkube dashboard. Bundles noVNC ${novncVersion} (MPL-2.0, source: https://github.com/novnc/noVNC) with pako (MIT), and xterm.js (MIT, source: https://github.com/xtermjs/xterm.js). */` },
  outdir: path.join(out, 'ui'),
  entryNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  metafile: true,
  logLevel: 'warning',
});

// The hashed names go into index.html; assets can then be cached for good
// while index.html is never cached.
const names = {};
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  if (!meta.entryPoint) continue;
  names[path.extname(file)] = '/ui/' + path.basename(file);
}
if (!names['.js'] || !names['.css']) throw new Error('build: missing outputs ' + JSON.stringify(names));
const html = (await readFile(path.join(here, 'src', 'index.html'), 'utf8'))
  .replace('%APP_JS%', names['.js'])
  .replace('%APP_CSS%', names['.css']);
await writeFile(path.join(out, 'index.html'), html);
await cp(path.join(here, 'src', 'favicon.svg'), path.join(out, 'ui', 'favicon.svg'));

await rm(embed, { recursive: true, force: true });
await mkdir(path.dirname(embed), { recursive: true });
await cp(out, embed, { recursive: true });
console.log(`dashboard built: ${Object.values(names).join(', ')} -> web/dist, internal/web/dist/app`);
