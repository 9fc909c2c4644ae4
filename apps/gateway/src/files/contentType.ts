import path from 'node:path';

/** Text whose type a browser or client should read as UTF-8. */
const TEXT: Record<string, string> = {
  '.md': 'text/markdown',
  '.markdown': 'text/markdown',
  '.txt': 'text/plain',
  '.log': 'text/plain',
  '.csv': 'text/csv',
  '.tsv': 'text/tab-separated-values',
  '.html': 'text/html',
  '.htm': 'text/html',
  '.css': 'text/css',
  '.xml': 'application/xml',
  '.json': 'application/json',
  '.jsonl': 'application/jsonl',
  '.ndjson': 'application/x-ndjson',
  '.yaml': 'application/yaml',
  '.yml': 'application/yaml',
  '.toml': 'application/toml',
  '.js': 'text/javascript',
  '.mjs': 'text/javascript',
  '.cjs': 'text/javascript',
  '.ts': 'text/x-typescript',
  '.tsx': 'text/x-typescript',
  '.jsx': 'text/javascript',
  '.py': 'text/x-python',
  '.sh': 'text/x-shellscript',
  '.sql': 'application/sql',
  '.svg': 'image/svg+xml',
  '.go': 'text/x-go',
  '.rs': 'text/x-rust',
  '.java': 'text/x-java',
  '.c': 'text/x-c',
  '.h': 'text/x-c',
  '.cpp': 'text/x-c++',
  '.rb': 'text/x-ruby',
  '.ini': 'text/plain',
};

/** Binary types a client may preview (images, PDF) or save. */
const BINARY: Record<string, string> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.gif': 'image/gif',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.pdf': 'application/pdf',
  '.zip': 'application/zip',
  '.gz': 'application/gzip',
  '.tar': 'application/x-tar',
  '.wasm': 'application/wasm',
  '.mp3': 'audio/mpeg',
  '.wav': 'audio/wav',
  '.mp4': 'video/mp4',
};

export const FALLBACK_CONTENT_TYPE = 'application/octet-stream';

/**
 * The content type a workspace file is served with, from its extension: text types with `charset=utf-8` (what the
 * file tools write), `application/octet-stream` for anything not known.
 *
 * @example
 * contentTypeOf('notes/hello.md'); // 'text/markdown; charset=utf-8'
 */
export function contentTypeOf(file: string): string {
  const extension = path.posix.extname(file).toLowerCase();
  const text = TEXT[extension];
  if (text) return `${text}; charset=utf-8`;
  return BINARY[extension] ?? FALLBACK_CONTENT_TYPE;
}
