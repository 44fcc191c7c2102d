// Copies the node icons and codex files next to the compiled nodes: tsc
// emits only JavaScript, and n8n loads `file:<icon>` relative to the node.
const fs = require('fs');
const path = require('path');

for (const dir of ['nodes', 'credentials']) {
	const walk = (from) => {
		for (const entry of fs.readdirSync(from, { withFileTypes: true })) {
			const src = path.join(from, entry.name);
			if (entry.isDirectory()) walk(src);
			else if (/\.(svg|png|json)$/.test(entry.name)) {
				const dest = path.join('dist', src);
				fs.mkdirSync(path.dirname(dest), { recursive: true });
				fs.copyFileSync(src, dest);
			}
		}
	};
	walk(dir);
}
