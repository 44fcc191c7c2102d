// n8n loads the nodes and credentials named in package.json's "n8n" section;
// this entry point exists only so that `require('n8n-nodes-oncegate')` resolves.
module.exports = {};
